"""GCP provider through the real google-cloud-compute SDK (REST transport) against a
stateful loopback server replaying the Compute Engine shapes: the contract suite, create
(key, labels, firewall rule, spot, deadline), failures that clean up after themselves,
listing, preemption and what is not ours (foreign VMs, other owners' rules).
Offers and prices: test_gcp_offers.py; credentials and `check`: test_gcp_credentials.py."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace

import pytest
from cloudgpu_providers.gcp import GCPProvider

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, ConfigError, ProviderError, QuotaError
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, TAG_OWNER, CreateRequest, Instance, InstanceState
from cloudgpu.testing import PlacementOf, ProviderContract
from tests.backoff import jittered
from tests.fixtures.gcp.server import FakeGCP
from tests.providers.gcp_kit import by_key, fake, make_provider, offer, offers, provider

__all__ = ["fake", "offer", "offers", "provider"]  # the fixtures, imported for pytest


class TestGCPContract(ProviderContract):
    provider_name = "gcp"

    @pytest.fixture
    def placement_of(self, fake: FakeGCP) -> PlacementOf:
        """The placement policies and the group's network tags (all but the VM's own,
        which its SSH rule targets) of the VM as Compute Engine stored it."""

        def placement(i: Instance) -> tuple[tuple[str, ...], tuple[str, ...]]:
            zone, name = i.id.split("/", 1)
            body = fake.instances[(zone, name)]["_body"]
            tags = [t for t in body.get("tags", {}).get("items", []) if t != name]
            return tuple(body.get("resourcePolicies", [])), tuple(tags)

        return placement


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
