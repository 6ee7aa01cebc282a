"""Lambda provider against a stateful loopback REST server replaying Lambda's shapes."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.lambda_cloud import LambdaProvider, names

from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer
from cloudgpu.errors import AuthError, CapacityError, QuotaError, TransientError
from cloudgpu.paths import Paths
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_OWNER,
    InstanceState,
    ProviderContext,
)
from cloudgpu.sshkeys import ensure_keypair
from cloudgpu.testing import ProviderContract
from tests.backoff import jittered

# `lambda` is a keyword, so the fixture folder can't appear in an import statement.
FakeLambda = importlib.import_module("tests.fixtures.lambda.server").FakeLambda


@pytest.fixture
def fake() -> Iterator[Any]:
    server = FakeLambda().start()
    yield server
    server.stop()


def make_provider(fake: Any, paths: Paths, **config: object) -> LambdaProvider:
    sleeps: list[float] = []
    ctx = ProviderContext(
        config={"poll_s": 0.0, **config},
        paths=paths,
        env={"LAMBDA_API_KEY": fake.api_key, "LAMBDA_API_BASE_URL": fake.base_url},
        sleep=sleeps.append,
    )
    provider = LambdaProvider(ctx)
    provider.sleeps = sleeps  # type: ignore[attr-defined]
    return provider


@pytest.fixture
def provider(fake: Any, paths: Paths) -> LambdaProvider:
    return make_provider(fake, paths)


@pytest.fixture
def offer(provider: LambdaProvider) -> Offer:
    return next(o for o in provider.fetch_offers() if o.instance_type == "gpu_1x_a10")


class TestLambdaContract(ProviderContract):
    provider_name = "lambda"


def request(offer: Offer, job: str | None = None):  # type: ignore[no-untyped-def]
    return ProviderContract().request(offer, job)


def test_fetch_offers_normalizes_prices_names_and_regions(provider: LambdaProvider) -> None:
    offers = provider.fetch_offers()
    by_key = {(o.instance_type, o.region): o for o in offers}
    a10 = by_key[("gpu_1x_a10", "us-east-1")]
    assert a10.price_per_hour == pytest.approx(0.75)  # cents per hour -> dollars
    assert (a10.gpu, a10.gpu_count, a10.gpu_memory_gb) == ("A10", 1, 24)
    assert (a10.vcpus, a10.memory_gb, a10.market) == (30, 200, "on_demand")
    assert ("gpu_1x_a10", "us-west-1") in by_key  # one offer per region with capacity
    big = by_key[("gpu_8x_a100_80gb_sxm4", "us-east-1")]
    assert (big.gpu, big.gpu_count, big.price_per_hour) == ("A100-80GB-SXM", 8, 14.32)
    assert by_key[("gpu_1x_h100_sxm5", "us-south-1")].gpu == "H100-SXM"
    # Sold out everywhere: no live offer; CPU-only types: none either.
    assert not any(o.instance_type in ("gpu_1x_a100", "cpu_4x_general") for o in offers)
    mystery = by_key[("gpu_1x_mystery", "us-west-1")]
    assert FLAG_UNKNOWN_GPU in mystery.flags and mystery.gpu == "Mystery X1 (12 GB)"
    assert all(o.provider == "lambda" and o.observed_at.endswith("Z") for o in offers)


def test_key_sent_as_bearer_header_not_in_url(provider: LambdaProvider, fake: Any) -> None:
    provider.fetch_offers()
    req = fake.requests[-1]
    assert req["auth"] == f"Bearer {fake.api_key}"
    assert fake.api_key not in req["path"]


def test_throttling_then_success_is_retried_with_backoff(
    provider: LambdaProvider, fake: Any
) -> None:
    fake.fail_next = ["error_throttled", "error_unavailable"]
    assert provider.fetch_offers()
    assert jittered(provider.sleeps, [1.0, 2.0])  # type: ignore[attr-defined]
    assert fake.calls() == ["GET /instance-types"] * 3


def test_throttling_gives_up_after_attempts(fake: Any, paths: Paths) -> None:
    provider = make_provider(fake, paths, attempts=2)
    fake.fail_next = ["error_throttled"] * 3
    with pytest.raises(TransientError, match="429"):
        provider.fetch_offers()


def test_bad_key_is_auth_error_without_the_key(fake: Any, paths: Paths) -> None:
    wrong = "secret_WRONGKEY_00000000000000000000"
    ctx = ProviderContext(
        config={}, paths=paths, env={"LAMBDA_API_KEY": wrong, "LAMBDA_API_BASE_URL": fake.base_url}
    )
    with pytest.raises(AuthError) as err:
        LambdaProvider(ctx).check()
    assert "WRONGKEY" not in str(err.value) and "invalid-api-key" in str(err.value)
    assert "LAMBDA_API_KEY" in (err.value.hint or "")


def test_check_makes_one_read_only_call(provider: LambdaProvider, fake: Any) -> None:
    av = provider.check()
    assert av.enabled and "env:LAMBDA_API_KEY" in av.reason
    assert fake.calls() == ["GET /ssh-keys"]


def test_no_credentials_is_disabled_with_reason(paths: Paths) -> None:
    av = LambdaProvider(ProviderContext(config={}, paths=paths, env={})).availability()
    assert not av.enabled and "LAMBDA_API_KEY" in av.reason
    assert av.sources == ("env:LAMBDA_API_KEY", "config:api_key")


def test_config_key_is_a_source(paths: Paths) -> None:
    ctx = ProviderContext(config={"api_key": "secret_FROMCONFIG"}, paths=paths, env={})
    av = LambdaProvider(ctx).availability()
    assert av.enabled and "config:api_key" in av.reason and "FROMCONFIG" not in av.reason


def test_capacity_error_maps_to_capacity_and_leaves_nothing(
    provider: LambdaProvider, fake: Any, offer: Offer
) -> None:
    fake.capacity = False
    with pytest.raises(CapacityError, match="insufficient-capacity"):
        provider.create(request(offer))
    assert fake.instances == {}


def test_quota_error_maps_to_quota(provider: LambdaProvider, fake: Any, offer: Offer) -> None:
    fake.launch_error = "error_quota"
    with pytest.raises(QuotaError):
        provider.create(request(offer))


def test_spot_request_fails_over_as_capacity(provider: LambdaProvider, offer: Offer) -> None:
    with pytest.raises(CapacityError, match="spot"):
        provider.create(request(replace(offer, market="spot")))


def test_create_registers_key_once_and_names_the_instance(
    provider: LambdaProvider, fake: Any, offer: Offer, paths: Paths
) -> None:
    first = provider.create(request(offer, job="job-a"))
    second = provider.create(request(offer, job="job-b"))
    _, public = ensure_keypair(paths.keys_dir)  # no key given: the client's own key
    assert [k["public_key"] for k in fake.ssh_keys.values()] == [public]
    body = fake.instances[first.id]["_body"]
    assert body["region_name"] == "us-east-1" and body["instance_type_name"] == "gpu_1x_a10"
    assert "quantity" not in body and len(body["ssh_key_names"]) == 1
    assert body["name"].startswith("cg.job-a.") and len(body["name"]) <= 64
    running = ProviderContract().wait_running(provider, first.id)
    assert running.ssh is not None and (running.ssh.host, running.ssh.user) == (
        "198.51.100.2",
        "ubuntu",
    )
    assert running.tags[TAG_JOB] == "job-a" and running.price_per_hour == pytest.approx(0.75)
    for inst in (first, second):
        provider.terminate(inst.id)
    assert fake.instances == {}


def test_create_with_same_key_is_idempotent(
    provider: LambdaProvider, fake: Any, offer: Offer
) -> None:
    req = request(offer)
    first = provider.create(req)
    again = provider.create(req)
    assert again.id == first.id and len(fake.instances) == 1
    provider.terminate(first.id)


def test_states_follow_the_instance(provider: LambdaProvider, fake: Any, offer: Offer) -> None:
    fake.boot_polls = 2
    inst = provider.create(request(offer))
    assert inst.state == InstanceState.PENDING
    assert provider.describe(inst.id).state == InstanceState.PENDING
    assert provider.describe(inst.id).state == InstanceState.RUNNING
    fake.instances[inst.id]["status"] = "unhealthy"
    assert provider.describe(inst.id).state == InstanceState.UNKNOWN
    fake.instances[inst.id]["status"] = "active"
    provider.terminate(inst.id)
    assert provider.describe(inst.id).state == InstanceState.TERMINATED


def test_list_filters_by_encoded_tags_and_ignores_foreign_instances(
    provider: LambdaProvider, fake: Any, offer: Offer
) -> None:
    mine = provider.create(request(offer, job="job-a"))
    fake.instances["foreign"] = {**fake.instances[mine.id], "id": "foreign", "name": "my box"}
    found = provider.list_instances({TAG_OWNER: "contract-test"})
    assert [i.id for i in found] == [mine.id]
    assert found[0].tags[TAG_JOB] == "job-a" and found[0].tags[TAG_OWNER] == "contract-test"
    assert provider.list_instances({TAG_OWNER: "someone-else"}) == []
    # A key the name cannot carry matches nothing rather than everything.
    assert provider.list_instances({TAG_EXPIRES: "1"}) == []
    provider.terminate(mine.id)
    assert provider.list_instances({TAG_JOB: "job-a"}) == []


def test_terminate_that_does_not_take_is_reported(
    provider: LambdaProvider, fake: Any, offer: Offer
) -> None:
    inst = provider.create(request(offer))
    original = fake._terminate
    fake._terminate = lambda body: (200, {"data": {"terminated_instances": []}})  # type: ignore[method-assign]
    with pytest.raises(TransientError, match="still exists"):
        provider.terminate(inst.id)
    fake._terminate = original  # type: ignore[method-assign]
    provider.terminate(inst.id)
    assert fake.instances == {}


def test_names_fit_and_match() -> None:
    tags = {
        TAG_JOB: "a" * 40 + "-abcdef",  # the longest job id new_job_id makes
        TAG_OWNER: "someone.with.a.long.name@a-very-long-hostname.example.com",
        TAG_INSTANCE: "i-0123456789",
        TAG_EXPIRES: "1800000000",
    }
    name = names.encode(tags, "token")
    assert len(name) == 64
    assert names.matches(name, {TAG_JOB: tags[TAG_JOB], TAG_OWNER: tags[TAG_OWNER]})
    assert names.matches(name, {TAG_INSTANCE: "i-0123456789"})
    assert not names.matches(name, {TAG_INSTANCE: "i-9999999999"})
    assert names.readable_tags(name)[TAG_JOB] == tags[TAG_JOB]
    too_long = names.encode({TAG_JOB: "x" * 60}, "t")
    assert len(too_long) <= 64 and names.matches(too_long, {TAG_JOB: "x" * 60})
    assert TAG_JOB not in names.readable_tags(too_long)
    assert names.fields("someone's box") is None


def test_user_data_and_image_family_are_passed(
    provider: LambdaProvider, fake: Any, offer: Offer, tmp_path: Path
) -> None:
    req = replace(request(offer), user_data="#cloud-config\n", image="lambda-stack-22-04")
    inst = provider.create(req)
    body = fake.instances[inst.id]["_body"]
    assert body["user_data"] == "#cloud-config\n"
    assert body["image"] == {"family": "lambda-stack-22-04"}
    provider.terminate(inst.id)


def test_launch_whose_answer_is_lost_is_found_not_repeated(
    provider: LambdaProvider, fake: Any, offer: Offer
) -> None:
    fake.lose_next_answer = True  # Lambda launched it, but the connection broke
    inst = provider.create(request(offer))
    assert len(fake.instances) == 1 and inst.id in fake.instances
    launches = [c for c in fake.calls() if c == "POST /instance-operations/launch"]
    assert len(launches) == 1  # a launch is never blindly re-sent
    provider.terminate(inst.id)


def test_the_fake_refuses_what_the_launch_schema_does_not_list(
    provider: LambdaProvider, fake: Any, offer: Offer
) -> None:
    """`quantity` is gone from InstanceLaunchRequest: a body carrying it is refused, as the
    current schema's strict validation would; the provider's own body passes."""
    problem = importlib.import_module("tests.fixtures.lambda.server").launch_schema_problem
    inst = provider.create(request(offer, job="schema"))
    body = fake.instances[inst.id]["_body"]
    assert problem(body) == ""
    assert problem({**body, "quantity": 1}) == "unknown field(s): quantity"
    assert "exactly one" in problem({**body, "ssh_key_names": ["a", "b"]})
