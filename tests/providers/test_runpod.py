"""RunPod provider against a stateful loopback GraphQL server replaying RunPod's shapes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cloudgpu_providers.runpod import RunPodProvider

from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer
from cloudgpu.errors import AuthError, CapacityError, ProviderError, TransientError
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, InstanceState, ProviderContext
from cloudgpu.testing import ProviderContract
from tests.backoff import jittered
from tests.fixtures.runpod.server import FakeRunPod


@pytest.fixture
def fake() -> Iterator[FakeRunPod]:
    server = FakeRunPod().start()
    yield server
    server.stop()


def make_provider(fake: FakeRunPod, paths: Paths, **config: object) -> RunPodProvider:
    sleeps: list[float] = []
    ctx = ProviderContext(
        config={"poll_s": 0.0, **config},
        paths=paths,
        env={"RUNPOD_API_KEY": fake.api_key, "RUNPOD_API_BASE_URL": fake.base_url},
        sleep=sleeps.append,
    )
    provider = RunPodProvider(ctx)
    provider.sleeps = sleeps  # type: ignore[attr-defined]
    return provider


@pytest.fixture
def provider(fake: FakeRunPod, paths: Paths) -> RunPodProvider:
    return make_provider(fake, paths)


@pytest.fixture
def offer(provider: RunPodProvider) -> Offer:
    return next(o for o in provider.fetch_offers() if o.gpu == "A100-80GB-PCIe")


class TestRunPodContract(ProviderContract):
    provider_name = "runpod"


def test_fetch_offers_normalizes_prices_and_names(provider: RunPodProvider) -> None:
    offers = provider.fetch_offers()
    by_type = {o.instance_type: o for o in offers}
    a100 = by_type["2x_A100-80GB-PCIe_COMMUNITY"]
    assert a100.price_per_hour == pytest.approx(2 * 1.19)
    assert a100.gpu_memory_gb == 80 and a100.market == "on_demand"
    assert a100.extra == {"gpu_type_id": "NVIDIA A100 80GB PCIe", "cloud_type": "COMMUNITY"}
    # H100 SXM has no community price: no community offer, never an invented one.
    assert "1x_H100-SXM_SECURE" in by_type and "1x_H100-SXM_COMMUNITY" not in by_type
    # A6000 goes up to 4 GPUs per pod.
    assert "4x_RTXA6000_SECURE" in by_type and "8x_RTXA6000_SECURE" not in by_type
    # A name the registry does not know is kept and flagged, not dropped.
    mystery = by_type["1x_NVIDIA Mystery Card X_SECURE"]
    assert FLAG_UNKNOWN_GPU in mystery.flags
    assert all(o.market == "on_demand" for o in offers)  # spot pods are retired
    assert not any(o.gpu == "unknown" for o in offers)


def test_key_sent_as_bearer_header_not_in_url(provider: RunPodProvider, fake: FakeRunPod) -> None:
    provider.fetch_offers()
    req = fake.requests[-1]
    assert req["auth"] == f"Bearer {fake.api_key}"
    assert fake.api_key not in req["path"]


def test_throttling_is_retried_with_backoff(provider: RunPodProvider, fake: FakeRunPod) -> None:
    fake.fail_next = ["error_throttled", "error_throttled"]
    assert provider.fetch_offers()
    assert jittered(provider.sleeps, [1.0, 2.0])  # type: ignore[attr-defined]
    assert fake.operations() == ["gpuTypes"] * 3


def test_throttling_gives_up_after_attempts(fake: FakeRunPod, paths: Paths) -> None:
    provider = make_provider(fake, paths, attempts=2)
    fake.fail_next = ["error_throttled"] * 3
    with pytest.raises(TransientError):
        provider.fetch_offers()


def test_bad_key_is_auth_error_without_the_key(fake: FakeRunPod, paths: Paths) -> None:
    ctx = ProviderContext(
        config={},
        paths=paths,
        env={
            "RUNPOD_API_KEY": "rpa_WRONGKEY1234567890ABCDEFGHIJ",
            "RUNPOD_API_BASE_URL": fake.base_url,
        },
    )
    with pytest.raises(AuthError) as err:
        RunPodProvider(ctx).check()
    assert "WRONGKEY" not in str(err.value) and "RUNPOD_API_KEY" in (err.value.hint or "")


def test_check_makes_one_read_only_call(provider: RunPodProvider, fake: FakeRunPod) -> None:
    av = provider.check()
    assert av.enabled and "env:RUNPOD_API_KEY" in av.reason
    assert fake.operations() == ["myself"]
    assert fake.api_key not in av.reason


def test_no_credentials_is_disabled_with_reason(paths: Paths, tmp_path: Path) -> None:
    ctx = ProviderContext(config={}, paths=paths, env={"HOME": str(tmp_path)})
    av = RunPodProvider(ctx).availability()
    assert not av.enabled and "RUNPOD_API_KEY" in av.reason
    assert "env:RUNPOD_API_KEY" in av.sources


def test_runpodctl_config_file_is_a_source(paths: Paths, tmp_path: Path) -> None:
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "config.toml").write_text('apikey = "rpa_FROMFILE000000000000000000"\n')
    av = RunPodProvider(
        ProviderContext(config={}, paths=paths, env={"HOME": str(tmp_path)})
    ).availability()
    assert av.enabled and "config.toml" in av.reason and "FROMFILE" not in av.reason


def test_capacity_error_maps_to_capacity(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    fake.capacity = False
    with pytest.raises(CapacityError, match="no longer any instances"):
        provider.create(ProviderContract().request(offer))
    assert fake.pods == {}


def test_spot_request_fails_over_as_capacity(provider: RunPodProvider, offer: Offer) -> None:
    spot = Offer(**{**offer.to_dict(), "market": "spot"})
    with pytest.raises(CapacityError, match="spot"):
        provider.create(ProviderContract().request(spot))


def test_create_sends_key_tags_deadline(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer, paths: Paths
) -> None:
    req = ProviderContract().request(offer)
    inst = provider.create(req)
    sent = fake.pods[inst.id]["_input"]
    env = {e["key"]: e["value"] for e in sent["env"]}
    assert env["PUBLIC_KEY"].startswith("ssh-ed25519 ")
    assert sent["gpuTypeId"] == "NVIDIA A100 80GB PCIe" and sent["cloudType"] == "SECURE"
    assert sent["ports"] == "22/tcp" and sent["containerDiskInGb"] == req.disk_gb
    # The deadline is armed inside the pod: it removes itself with its pod-scoped key.
    assert 'runpodctl remove pod "$RUNPOD_POD_ID"' in sent["dockerArgs"]
    assert "exec /start.sh" in sent["dockerArgs"]
    key = paths.keys_dir / f"runpod-{req.name}"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    running = ProviderContract().wait_running(provider, inst.id)
    assert running.ssh is not None and running.ssh.key_file == str(key)
    assert (running.ssh.host, running.ssh.port, running.ssh.user) == ("203.0.113.10", 22107, "root")
    assert running.tags[TAG_JOB] == req.tags[TAG_JOB]
    provider.terminate(inst.id)


def test_create_with_same_token_is_idempotent(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    req = ProviderContract().request(offer)
    first = provider.create(req)
    again = provider.create(req)
    assert again.id == first.id and len(fake.pods) == 1
    assert again.tags[TAG_INSTANCE] == req.idempotency_token
    provider.terminate(first.id)


@pytest.mark.parametrize("status", [0, 502, 504], ids=["answer-lost", "bad-gateway", "timeout"])
def test_a_deploy_whose_answer_is_lost_is_found_not_sent_twice(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer, status: int
) -> None:
    # RunPod made the pod, then the answer never came back (or a gateway failed it): a
    # blind retry would make a second, billing pod. The pod is found by its token.
    fake.after_deploy = [status]
    req = ProviderContract().request(offer)
    inst = provider.create(req)
    assert len(fake.pods) == 1 and inst.id in fake.pods
    assert fake.operations().count("podFindAndDeployOnDemand") == 1
    provider.terminate(inst.id)


def test_a_deploy_that_did_not_land_is_sent_again_after_checking(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    fake.fail_next = ["error_throttled"]  # refused before acting: safe to send again
    inst = provider.create(ProviderContract().request(offer))
    assert len(fake.pods) == 1 and inst.id in fake.pods
    provider.terminate(inst.id)


def test_a_deploy_failed_before_landing_is_sent_again_with_jittered_waits(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    """Two gateway errors before RunPod acted: each time no pod carries the token, so the
    deploy is sent again after cloudgpu.retry's jittered wait; a third would give up."""
    fake.before_deploy = [502, 504]
    inst = provider.create(ProviderContract().request(offer))
    assert list(fake.pods) == [inst.id]
    assert fake.operations().count("podFindAndDeployOnDemand") == 3
    assert jittered(provider.sleeps, [2.0, 4.0])  # type: ignore[attr-defined]
    provider.terminate(inst.id)
    fake.before_deploy = [502, 502, 502]
    with pytest.raises(TransientError):
        provider.create(ProviderContract().request(offer))
    assert fake.pods == {}


def test_states_follow_the_pod(provider: RunPodProvider, fake: FakeRunPod, offer: Offer) -> None:
    fake.boot_polls = 2
    inst = provider.create(ProviderContract().request(offer))
    assert inst.state == InstanceState.PENDING
    assert provider.describe(inst.id).state == InstanceState.PENDING
    fake.pods[inst.id]["desiredStatus"] = "EXITED"
    assert provider.describe(inst.id).state == InstanceState.STOPPED
    fake.pods[inst.id]["desiredStatus"] = "RUNNING"
    assert provider.describe(inst.id).state == InstanceState.RUNNING
    provider.terminate(inst.id)
    assert provider.describe(inst.id).state == InstanceState.TERMINATED


def test_list_ignores_pods_not_made_by_cloudgpu(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    mine = provider.create(ProviderContract().request(offer, job="job-a"))
    fake.pods["foreign"] = {**fake.pods[mine.id], "id": "foreign", "env": [], "name": "someone"}
    found = provider.list_instances({TAG_JOB: "job-a"})
    assert [i.id for i in found] == [mine.id]
    provider.terminate(mine.id)
    assert provider.list_instances({TAG_JOB: "job-a"}) == []


def test_terminate_that_does_not_take_is_reported(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    inst = provider.create(ProviderContract().request(offer))
    pod = fake.pods[inst.id]
    fake.fail_next = []
    original = fake._dispatch

    def stubborn(op: str, variables: dict) -> object:  # terminate answers but the pod stays
        if op == "podTerminate":
            return {"data": {"podTerminate": None}}
        return original(op, variables)

    fake._dispatch = stubborn  # type: ignore[method-assign]
    with pytest.raises(TransientError, match="still exists"):
        provider.terminate(inst.id)
    fake._dispatch = original  # type: ignore[method-assign]
    assert fake.pods[inst.id] is pod
    provider.terminate(inst.id)
    assert inst.id not in fake.pods


def test_snapshot_offer_finds_gpu_type_and_data_center(
    provider: RunPodProvider, fake: FakeRunPod
) -> None:
    snap = Offer(
        provider="runpod",
        instance_type="1x_RTXA6000_COMMUNITY",
        region="CA",
        zone="CA-MTL-1",
        market="on_demand",
        gpu="RTXA6000",
        gpu_count=1,
        gpu_memory_gb=48,
        vcpus=8,
        memory_gb=50,
        price_per_hour=0.33,
        observed_at="2026-01-01T00:00:00Z",
    )
    inst = provider.create(ProviderContract().request(snap))
    sent = fake.pods[inst.id]["_input"]
    assert sent["gpuTypeId"] == "NVIDIA RTX A6000" and sent["cloudType"] == "COMMUNITY"
    assert sent["dataCenterId"] == "CA-MTL-1" and sent["minVcpuCount"] == 8
    provider.terminate(inst.id)


def test_the_fake_refuses_a_gpu_type_or_count_runpod_does_not_have(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    """A strict fake: a misspelt gpuTypeId or more GPUs than the type has is refused, a
    plain error (not "no capacity", which would fail over and hide the bug), no pod made."""
    typo = replace(offer, extra={**offer.extra, "gpu_type_id": "NVIDIA A100 80GB PCIE"})
    with pytest.raises(ProviderError, match=r"input\.gpuTypeId") as exc:
        provider.create(ProviderContract().request(typo))
    assert not isinstance(exc.value, CapacityError)
    too_many = replace(offer, instance_type="9x_A100-80GB-PCIe_SECURE", gpu_count=9)
    with pytest.raises(ProviderError, match=r"input\.gpuCount"):
        provider.create(ProviderContract().request(too_many))
    assert fake.pods == {}


def test_no_deadline_means_image_default_command(
    provider: RunPodProvider, fake: FakeRunPod, offer: Offer
) -> None:
    req = replace(ProviderContract().request(offer), deadline=None)
    inst = provider.create(req)
    assert fake.pods[inst.id]["_input"]["dockerArgs"] == ""
    provider.terminate(inst.id)
