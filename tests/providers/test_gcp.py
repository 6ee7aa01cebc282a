"""GCP provider through the real google-cloud-compute/billing SDKs (REST transport) against
a stateful loopback server replaying the Compute Engine and Cloud Billing shapes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cloudgpu_providers.gcp import GCPProvider, pricing

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    ProviderError,
    QuotaError,
    TransientError,
)
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, TAG_OWNER, CreateRequest, InstanceState, ProviderContext
from cloudgpu.testing import ProviderContract
from tests.backoff import jittered
from tests.fixtures.gcp.server import FakeGCP

SKU = {  # unit prices in tests/fixtures/gcp/skus_list.json
    "a2_core": 0.031611,
    "a2_ram": 0.004237,
    "a100": 2.933908,
    "a2_core_spot": 0.009483,
    "a2_ram_spot": 0.001271,
    "a100_spot": 1.1,
    "n1_core": 0.031611,
    "n1_ram": 0.004237,
    "t4": 0.35,
    "g2_core": 0.024988,
    "g2_ram": 0.002927,
    "l4": 0.560347,
}


@pytest.fixture
def fake() -> Iterator[FakeGCP]:
    server = FakeGCP().start()
    yield server
    server.stop()


def make_provider(fake: FakeGCP, paths: Paths, **config: object) -> GCPProvider:
    sleeps: list[float] = []
    ctx = ProviderContext(
        config={
            "project": fake.project,
            "anonymous": True,
            "endpoint_url": fake.endpoint,
            "ssh_cidr": "198.51.100.7/32",
            "poll_s": 0.0,
            **config,
        },
        paths=paths,
        env={"HOME": str(paths.data_dir)},
        sleep=sleeps.append,
    )
    provider = GCPProvider(ctx)
    provider.sleeps = sleeps  # type: ignore[attr-defined]
    return provider


@pytest.fixture
def provider(fake: FakeGCP, paths: Paths) -> GCPProvider:
    return make_provider(fake, paths)


@pytest.fixture
def offers(provider: GCPProvider) -> list[Offer]:
    return provider.fetch_offers()


@pytest.fixture
def offer(offers: list[Offer]) -> Offer:
    return next(o for o in offers if o.instance_type == "a2-highgpu-1g" and o.market == "on_demand")


class TestGCPContract(ProviderContract):
    provider_name = "gcp"


def by_key(offers: list[Offer]) -> dict[tuple[str, str, str], Offer]:
    return {(o.instance_type, o.zone, o.market): o for o in offers}


def test_offers_sum_core_ram_and_gpu_skus(offers: list[Offer]) -> None:
    table = by_key(offers)
    a2 = table[("a2-highgpu-1g", "us-central1-a", "on_demand")]
    assert a2.gpu == "A100-40GB-SXM" and a2.gpu_count == 1 and a2.gpu_memory_gb == 40
    assert a2.vcpus == 12 and a2.memory_gb == 85
    assert a2.price_per_hour == pytest.approx(
        12 * SKU["a2_core"] + 85 * SKU["a2_ram"] + SKU["a100"]
    )
    spot = table[("a2-highgpu-1g", "us-central1-a", "spot")]
    expected = 12 * SKU["a2_core_spot"] + 85 * SKU["a2_ram_spot"] + SKU["a100_spot"]
    assert spot.price_per_hour == pytest.approx(expected)
    # The second page of machine types and of SKUs was read (G2 + L4 live there).
    g2 = table[("g2-standard-8", "us-central1-c", "on_demand")]
    assert g2.gpu == "L4"
    assert g2.price_per_hour == pytest.approx(8 * SKU["g2_core"] + 32 * SKU["g2_ram"] + SKU["l4"])
    assert all(o.region == o.zone.rsplit("-", 1)[0] and o.observed_at for o in offers)


def test_attached_gpus_get_a_documented_n1_host(offers: list[Offer]) -> None:
    table = by_key(offers)
    t4x2 = table[("n1-standard-8+2xnvidia-tesla-t4", "us-central1-a", "on_demand")]
    assert t4x2.gpu == "T4" and t4x2.gpu_count == 2 and t4x2.vcpus == 8
    assert t4x2.price_per_hour == pytest.approx(
        8 * SKU["n1_core"] + 30 * SKU["n1_ram"] + 2 * SKU["t4"]
    )
    assert ("n1-standard-4+1xnvidia-tesla-t4", "us-central1-a", "on_demand") in table
    # The Virtual Workstation variant is not a separate GPU.
    assert not any("vws" in o.instance_type for o in offers)


def test_missing_prices_are_not_guessed(offers: list[Offer]) -> None:
    # GB200 (a4x) has no public SKU and H200 no Spot SKU: no offer rather than an invented one.
    assert not any(o.instance_type.startswith("a4x-") for o in offers)
    assert not any(o.gpu == "H200-SXM" and o.market == "spot" for o in offers)
    # Sole-tenant, DWS, workstation and commitment SKUs price nothing.
    t4 = by_key(offers)[("n1-standard-4+1xnvidia-tesla-t4", "us-central1-a", "on_demand")]
    assert t4.price_per_hour == pytest.approx(4 * SKU["n1_core"] + 15 * SKU["n1_ram"] + SKU["t4"])


# What each GPU family GCP sells is offered as, from the real SKU wording in the fixture:
# (instance type, zone) -> markets. H200 has no Spot SKU; GB200 no SKU at all.
FAMILIES = {
    ("n1-standard-4+1xnvidia-tesla-t4", "us-central1-a"): ("T4", {"on_demand", "spot"}),
    ("n1-standard-4+1xnvidia-tesla-v100", "us-central1-a"): ("V100-16GB", {"on_demand", "spot"}),
    ("n1-standard-4+1xnvidia-tesla-p100", "us-central1-a"): ("P100", {"on_demand", "spot"}),
    ("n1-standard-4+1xnvidia-tesla-p4", "us-central1-a"): ("P4", {"on_demand", "spot"}),
    ("a2-highgpu-1g", "us-central1-a"): ("A100-40GB-SXM", {"on_demand", "spot"}),
    ("a2-ultragpu-1g", "us-central1-a"): ("A100-80GB-SXM", {"on_demand", "spot"}),
    ("g2-standard-8", "us-central1-c"): ("L4", {"on_demand", "spot"}),
    ("a3-highgpu-8g", "us-central1-c"): ("H100-SXM", {"on_demand", "spot"}),
    ("a3-megagpu-8g", "us-central1-c"): ("H100-SXM", {"on_demand", "spot"}),
    ("a3-ultragpu-8g", "us-central1-c"): ("H200-SXM", {"on_demand"}),
    ("a4-highgpu-8g", "us-central1-c"): ("B200", {"on_demand", "spot"}),
    ("g4-standard-48", "europe-west1-b"): ("nvidia-rtx-pro-6000", {"on_demand", "spot"}),
}


def test_every_gpu_family_is_offered_from_real_sku_names(offers: list[Offer]) -> None:
    found: dict[tuple[str, str], tuple[str, set[str]]] = {}
    for o in offers:
        gpu, markets = found.setdefault((o.instance_type, o.zone), (o.gpu, set()))
        assert gpu == o.gpu
        markets.add(o.market)
    for key, want in FAMILIES.items():
        assert found.get(key) == want, key


def test_spot_gpu_skus_attached_to_spot_vms_price_spot_offers(offers: list[Offer]) -> None:
    """'Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas' is the L4's
    Spot price; with 'Spot Preemptible G2 Instance Core/Ram' it makes the Spot offer."""
    g2 = by_key(offers)[("g2-standard-8", "us-central1-c", "spot")]
    assert g2.price_per_hour == pytest.approx(8 * 0.009995 + 32 * 0.001171 + 0.3192)


def test_family_specific_prices(offers: list[Offer]) -> None:
    table = by_key(offers)
    # a3-megagpu is priced with the A3Plus core/RAM SKUs and the Mega GPU SKU.
    mega = table[("a3-megagpu-8g", "us-central1-c", "on_demand")]
    assert mega.price_per_hour == pytest.approx(208 * 0.026924 + 1872 * 0.002344 + 8 * 11.7)
    high = table[("a3-highgpu-8g", "us-central1-c", "spot")]
    assert high.price_per_hour == pytest.approx(208 * 0.012888 + 1872 * 0.001127 + 8 * 4.424)
    assert high.nvme_count == 16 and high.nvme_size_gb == 375
    # A4 has no core/RAM SKUs: the "(1 gpu slice)" price is the whole VM per GPU.
    a4 = table[("a4-highgpu-8g", "us-central1-c", "spot")]
    assert a4.price_per_hour == pytest.approx(8 * 4.9542)
    # G4's GPU SKU is "RTX 6000 96GB", the accelerator nvidia-rtx-pro-6000 (96 GB).
    g4 = table[("g4-standard-48", "europe-west1-b", "on_demand")]
    assert g4.price_per_hour == pytest.approx(48 * 0.04891 + 180 * 0.005744 + 4.5)
    assert g4.gpu_memory_gb == 96 and g4.region == "europe-west1"


def test_spot_wording_wins_over_the_usage_type() -> None:
    """A crawler of the live catalog saw a Spot B200 slice SKU filed under OnDemand: the
    description decides, so it never becomes (or replaces) the on-demand price."""
    skus = [
        pricing.Sku(
            "Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas",
            "OnDemand",
            ("us-central1",),
            4.95,
            "GPU",
        ),
        pricing.Sku(
            "A4 Nvidia B200 (1 gpu slice) running in Americas",
            "OnDemand",
            ("us-central1",),
            16.11,
            "GPU",
        ),
        pricing.Sku(
            "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
            "Preemptible",
            ("us-central1",),
            0.2,
            "GPU",
        ),
        pricing.Sku(
            "Nvidia Tesla T4 GPU running in Americas", "Commit1Yr", ("us-central1",), 0.22, "GPU"
        ),
    ]
    table = pricing.price_table(skus)
    assert table.get("slice", "b200", "us-central1", "spot") == 4.95
    assert table.get("slice", "b200", "us-central1", "on_demand") == 16.11
    assert table.get("gpu", "t4", "us-central1", "spot") == 0.2
    assert table.get("gpu", "t4", "us-central1", "on_demand") is None


def test_throttled_listing_is_retried_with_backoff(provider: GCPProvider, fake: FakeGCP) -> None:
    fake.fail_next = [
        ("GET", "aggregated/machineTypes", "error_rate_limited"),
        ("GET", "/v1/services/", "error_backend"),
    ]
    assert provider.fetch_offers()
    assert jittered(provider.sleeps, [1.0, 1.0])  # type: ignore[attr-defined]


def test_auth_failure_is_auth_error(provider: GCPProvider, fake: FakeGCP) -> None:
    fake.fail_next = [("GET", "zones", "error_unauthorized")]
    with pytest.raises(AuthError) as err:
        provider.check()
    assert "application-default login" in (err.value.hint or "")


def test_check_is_one_cheap_call(provider: GCPProvider, fake: FakeGCP) -> None:
    av = provider.check()
    assert av.enabled and "test-project" in av.reason
    assert fake.requests == [("GET", "/compute/v1/projects/test-project/zones")]


def test_create_puts_key_labels_firewall_spot_deadline(
    provider: GCPProvider, fake: FakeGCP, offers: list[Offer], paths: Paths
) -> None:
    spot = by_key(offers)[("a2-highgpu-1g", "us-central1-a", "spot")]
    req = replace(ProviderContract().request(spot, job="Job.With_Caps"), disk_gb=250)
    inst = provider.create(req)
    assert inst.id == "us-central1-a/job-with-caps" and inst.market == "spot"
    body = fake.instances[("us-central1-a", "job-with-caps")]["_body"]
    meta = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert meta["ssh-keys"].startswith("cloudgpu:ssh-ed25519 ")
    assert meta["enable-oslogin"] == "FALSE"  # else project OS Login would ignore ssh-keys
    assert json.loads(meta["cloudgpu-tags"]) == dict(req.tags)
    assert body["labels"]["cloudgpu-job"] == "job_with_caps"  # GCP label rules
    disk = body["disks"][0]["initializeParams"]
    assert disk["diskSizeGb"] == "250" and disk["labels"] == body["labels"]
    assert disk["diskType"] == "zones/us-central1-a/diskTypes/pd-balanced"
    assert disk["sourceImage"].startswith(
        "projects/deeplearning-platform-release/global/images/family/"
    )
    sched = body["scheduling"]
    assert sched["provisioningModel"] == "SPOT" and sched["instanceTerminationAction"] == "DELETE"
    assert 3500 <= int(sched["maxRunDuration"]["seconds"]) <= 3601
    fw = fake.firewalls["job-with-caps-ssh"]
    assert fw["sourceRanges"] == ["198.51.100.7/32"] and fw["targetTags"] == ["job-with-caps"]
    assert fw["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    assert body["tags"]["items"] == ["job-with-caps"]
    key = paths.keys_dir / "gcp-job-with-caps"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert inst.tags == dict(req.tags)
    provider.terminate(inst.id)
    assert fake.instances == {} and fake.firewalls == {}


def test_n1_offer_attaches_its_gpus(
    provider: GCPProvider, fake: FakeGCP, offers: list[Offer]
) -> None:
    t4 = by_key(offers)[("n1-standard-8+2xnvidia-tesla-t4", "us-central1-a", "on_demand")]
    inst = provider.create(ProviderContract().request(t4, job="t4job"))
    body = fake.instances[("us-central1-a", "t4job")]["_body"]
    assert body["machineType"] == "zones/us-central1-a/machineTypes/n1-standard-8"
    assert body["guestAccelerators"] == [
        {
            "acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
            "acceleratorCount": 2,
        }
    ]
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"  # the deadline
    assert inst.instance_type == t4.instance_type
    provider.terminate(inst.id)


def test_same_request_id_does_not_create_twice(
    provider: GCPProvider, fake: FakeGCP, offer: Offer
) -> None:
    req = ProviderContract().request(offer)
    first = provider.create(req)
    again = provider.create(req)
    assert again.id == first.id and len(fake.instances) == 1
    inserts = [p for m, p in fake.requests if m == "POST" and p.endswith("/instances")]
    assert len(inserts) == 2  # the second insert was answered from its requestId
    provider.terminate(first.id)


def test_stockout_is_capacity_error_and_cleans_up(
    provider: GCPProvider, fake: FakeGCP, offer: Offer
) -> None:
    fake.exhausted_zones = {"us-central1-a"}
    with pytest.raises(CapacityError, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        provider.create(ProviderContract().request(offer))
    assert fake.instances == {} and fake.firewalls == {}


def test_zero_quota_is_quota_error_and_cleans_up(
    provider: GCPProvider, fake: FakeGCP, offer: Offer
) -> None:
    fake.gpu_quota_zero = True
    with pytest.raises(QuotaError, match="NVIDIA_A100_GPUS"):
        provider.create(ProviderContract().request(offer))
    assert fake.firewalls == {}


def test_list_by_label_follows_pages(provider: GCPProvider, fake: FakeGCP, offer: Offer) -> None:
    made = [provider.create(ProviderContract().request(offer, job=f"job-{i}")) for i in range(3)]
    other = provider.create(replace(ProviderContract().request(offer, job="job-x"), name="other"))
    fake.page_size = 1
    found = provider.list_instances({"cloudgpu-owner": "contract-test"})
    assert sorted(i.id for i in found) == sorted(i.id for i in [*made, other])
    assert [i.id for i in provider.list_instances({TAG_JOB: "job-1"})] == [made[1].id]
    for inst in [*made, other]:
        provider.terminate(inst.id)
    assert provider.list_instances({"cloudgpu-owner": "contract-test"}) == []


def test_preempted_spot_vm_reads_as_preempted(
    provider: GCPProvider, fake: FakeGCP, offers: list[Offer]
) -> None:
    spot = by_key(offers)[("a2-highgpu-1g", "us-central1-a", "spot")]
    inst = provider.create(ProviderContract().request(spot, job="spotty"))
    fake.preempt("us-central1-a", "spotty")
    assert provider.describe(inst.id).state == InstanceState.PREEMPTED
    provider.terminate(inst.id)  # the firewall rule is still ours to remove
    assert fake.firewalls == {}


def test_terminate_retries_a_throttled_delete(
    provider: GCPProvider, fake: FakeGCP, offer: Offer
) -> None:
    inst = provider.create(ProviderContract().request(offer))
    fake.fail_next = [("DELETE", "/instances/", "error_rate_limited")]
    provider.terminate(inst.id)
    assert fake.instances == {}
    assert jittered(provider.sleeps, [1.0])  # type: ignore[attr-defined]


def test_throttling_that_persists_is_transient(fake: FakeGCP, paths: Paths) -> None:
    provider = make_provider(fake, paths, attempts=2)
    fake.fail_next = [("GET", "zones", "error_rate_limited")] * 2
    with pytest.raises(TransientError):
        provider.check()


def test_no_credentials_is_disabled_with_reason(paths: Paths, tmp_path: Path) -> None:
    ctx = ProviderContext(config={}, paths=paths, env={"HOME": str(tmp_path)})
    av = GCPProvider(ctx).availability()
    assert not av.enabled and "Application Default Credentials" in av.reason
    assert "env:GOOGLE_APPLICATION_CREDENTIALS" in av.sources


def test_adc_file_and_project_are_found_without_network(paths: Paths, tmp_path: Path) -> None:
    adc = tmp_path / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    secret = "1//0SECRET-REFRESH-TOKEN"
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "x",
                "client_secret": "y",
                "refresh_token": secret,
                "quota_project_id": "my-proj",
            }
        )
    )
    av = GCPProvider(
        ProviderContext(config={}, paths=paths, env={"HOME": str(tmp_path)})
    ).availability()
    assert av.enabled and "gcloud ADC (authorized_user)" in av.reason and "my-proj" in av.reason
    assert secret not in av.reason


def test_credentials_without_project_are_not_enough(paths: Paths, tmp_path: Path) -> None:
    key = tmp_path / "sa.json"
    key.write_text(json.dumps({"type": "service_account"}))
    env = {"HOME": str(tmp_path), "GOOGLE_APPLICATION_CREDENTIALS": str(key)}
    av = GCPProvider(ProviderContext(config={}, paths=paths, env=env)).availability()
    assert not av.enabled and "no project" in av.reason


def test_importing_the_provider_loads_no_sdk() -> None:
    code = "import sys, cloudgpu_providers.gcp; print([m for m in sys.modules if 'google' in m])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def foreign_vm(fake: FakeGCP, zone: str, name: str) -> None:
    """A VM someone made by hand: no cloudgpu metadata, same label key by coincidence."""
    body = {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/n1-standard-4",
        "labels": {"cloudgpu-job": "taken"},
    }
    fake.instances[(zone, name)] = fake._new_instance(zone, body)


def test_foreign_vm_with_our_name_is_neither_adopted_nor_deleted(
    provider: GCPProvider, fake: FakeGCP, offer: Offer
) -> None:
    foreign_vm(fake, "us-central1-a", "taken")
    with pytest.raises(ProviderError, match="not this job's"):
        provider.create(ProviderContract().request(offer, job="taken"))
    assert ("us-central1-a", "taken") in fake.instances
    assert fake.firewalls == {}  # the rule it had just made is gone again


def test_foreign_vms_are_never_listed(provider: GCPProvider, fake: FakeGCP, offer: Offer) -> None:
    foreign_vm(fake, "us-central1-a", "handmade")
    mine = provider.create(ProviderContract().request(offer, job="mine"))
    assert [i.id for i in provider.list_instances({})] == [mine.id]
    provider.terminate(mine.id)
    assert provider.list_instances({}) == []
    assert ("us-central1-a", "handmade") in fake.instances


def test_preemption_notice_from_outside(fake: FakeGCP, paths: Paths, offers: list[Offer]) -> None:
    now = [1_000.0]
    provider = make_provider(fake, paths)
    provider.ctx.clock = lambda: now[0]
    spot = by_key(offers)[("a2-highgpu-1g", "us-central1-a", "spot")]
    inst = provider.create(ProviderContract().request(spot, job="notice"))
    assert provider.preemption_notice(inst) is None
    fake.preempt("us-central1-a", "notice")
    now[0] += 1  # no rate limit here: that is the lifecycle's (cloudgpu/lifecycle/watch.py)
    assert provider.preemption_notice(inst) == 1_001.0
    provider.terminate(inst.id)


def test_anonymous_needs_an_endpoint(paths: Paths) -> None:
    ctx = ProviderContext(config={"anonymous": True, "project": "p"}, paths=paths, env={})
    av = GCPProvider(ctx).availability()
    assert not av.enabled and "endpoint_url" in av.reason


def test_shape_not_offered_in_zone_fails_over(
    provider: GCPProvider, fake: FakeGCP, offer: Offer
) -> None:
    stale = replace(offer, instance_type="a3-highgpu-8g", zone="us-central1-a")
    with pytest.raises(CapacityError, match="does not exist in zone"):
        provider.create(ProviderContract().request(stale))
    assert fake.instances == {} and fake.firewalls == {}


def test_ssh_port_opens_that_port_and_is_where_ssh_goes(
    fake: FakeGCP, paths: Paths, offer: Offer
) -> None:
    provider = make_provider(fake, paths, ssh_port=2222, ssh_user="ml", nvme_mount="/mnt/ssd")
    inst = provider.create(ProviderContract().request(offer, job="portjob"))
    assert fake.firewalls["portjob-ssh"]["allowed"] == [{"IPProtocol": "tcp", "ports": ["2222"]}]
    assert inst.ssh is not None and (inst.ssh.port, inst.ssh.user) == (2222, "ml")
    assert inst.nvme_mount == "/mnt/ssd"
    assert provider.describe(inst.id).ssh.port == 2222  # type: ignore[union-attr]
    provider.terminate(inst.id)


@pytest.mark.parametrize("port", ["ssh", 0, 70000, True])
def test_bad_ssh_port_is_a_config_error(
    fake: FakeGCP, paths: Paths, offer: Offer, port: object
) -> None:
    provider = make_provider(fake, paths, ssh_port=port)
    with pytest.raises(ConfigError, match=r"providers\.gcp\.ssh_port: expected a port number"):
        provider.create(ProviderContract().request(offer, job="badport"))
    assert fake.instances == {} and fake.firewalls == {}  # refused before any call


def test_a_rule_left_by_a_killed_create_is_a_leftover_of_its_owner_only(
    provider: GCPProvider, fake: FakeGCP, offer: Offer
) -> None:
    """A create killed after its firewall rule but before the VM leaves the rule; the
    sweep finds it by the tags in its description, never another owner's rule nor one
    the user made by hand."""
    for job, who in (("killed-1", "me"), ("theirs-1", "someone-else"), ("killed-2", "me")):
        provider.create(CreateRequest(offer=offer, name=job, tags={TAG_JOB: job, TAG_OWNER: who}))
    for job in ("killed-1", "killed-2"):  # the VM never came: only the rule was made
        del fake.instances[next(k for k in fake.instances if k[1] == job)]
    fake.firewalls["office-ssh"] = {**fake.firewalls["theirs-1-ssh"], "name": "office-ssh",
                                    "description": "allow ssh from the office"}  # fmt: skip
    found = provider.leftovers({TAG_OWNER: "me"})
    assert sorted(x.id for x in found) == ["killed-1-ssh", "killed-2-ssh"]
    assert {x.kind for x in found} == {"firewall rule"}
    assert found[0].tags[TAG_OWNER] == "me" and found[0].tags[TAG_JOB].startswith("killed-")
    for item in found + found:  # idempotent: a rule already gone is fine
        provider.remove_leftover(item)
    assert sorted(fake.firewalls) == ["office-ssh", "theirs-1-ssh"]
    assert provider.leftovers({TAG_OWNER: "me"}) == []
