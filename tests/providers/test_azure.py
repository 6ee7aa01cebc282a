"""Azure provider against a stateful fake ARM on loopback HTTPS (tests/fixtures/azure):
the shared contract, what create() sends, error mapping, cleanup, paging, eviction."""

from __future__ import annotations

import base64
import json
import ssl
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.azure import AzureProvider

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    NotFoundError,
    QuotaError,
    TransientError,
)
from cloudgpu.paths import Paths
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    Instance,
    InstanceState,
    ProviderContext,
)
from cloudgpu.testing import PlacementOf, ProviderContract
from tests.fixtures.azure.fake_arm import FakeArm, provider_config
from tests.fixtures.azure.fake_retail import FakeRetail
from tests.fixtures.azure.support import TOKEN, StaticToken

A100 = "Standard_NC24ads_A100_v4"
H100 = "Standard_ND96isr_H100_v5"


def make_offer(size: str = A100, market: str = "on_demand", zone: str = "") -> Offer:
    return Offer(
        provider="azure",
        instance_type=size,
        region="eastus",
        zone=zone,
        market=market,
        gpu="A100-80GB-PCIe",
        gpu_count=1,
        gpu_memory_gb=80,
        vcpus=24,
        memory_gb=220,
        price_per_hour=3.673 if market == "on_demand" else 0.7346,
        observed_at="2026-12-01T00:00:00Z",
    )


def make_provider(
    arm: FakeArm, paths: Paths, token: str | None = None, **cfg: Any
) -> AzureProvider:
    ctx = ProviderContext(
        config=provider_config(arm, **cfg), paths=paths, env={}, sleep=lambda s: None
    )
    return AzureProvider(ctx, credential=StaticToken(token) if token else StaticToken())


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    with FakeArm(tmp_path) as fake:
        yield fake


def request(name: str, offer: Offer | None = None, **kw: Any) -> CreateRequest:
    tags = {TAG_JOB: name, TAG_OWNER: "tester", TAG_EXPIRES: str(int(time.time()) + 3600)}
    return CreateRequest(
        offer=offer or make_offer(), name=name, tags=tags, deadline=time.time() + 3600, **kw
    )


class TestAzureContract(ProviderContract):
    provider_name = "azure"

    @pytest.fixture
    def provider(self, arm: FakeArm, paths: Paths) -> Iterator[AzureProvider]:
        """With the Retail Prices API replayed too, so its live offers are checked."""
        with FakeRetail() as retail:
            yield make_provider(arm, paths, retail_prices_url=retail.url)

    @pytest.fixture
    def offer(self) -> Offer:
        return make_offer()

    @pytest.fixture
    def placement_of(self, arm: FakeArm) -> PlacementOf:
        """The resource group, proximity placement group and availability set of the
        VM as ARM stored it."""

        def placement(i: Instance) -> tuple[str, str, str]:
            group, name = i.id.split("/", 1)
            rid = next(r for r in arm.state.resources if r.endswith(f"/virtualmachines/{name}"))
            props = arm.state.resources[rid].get("properties", {})
            ppg = (props.get("proximityPlacementGroup") or {}).get("id", "")
            avset = (props.get("availabilitySet") or {}).get("id", "")
            return group.lower(), ppg.lower(), avset.lower()

        return placement


def puts(arm: FakeArm) -> list[tuple[str, Any]]:
    return [(path, body) for method, path, body in arm.state.requests if method == "PUT"]


def test_spot_create_sends_tags_cidr_key_spot_fields_and_schedule(
    arm: FakeArm, paths: Paths
) -> None:
    provider = make_provider(arm, paths)
    inst = provider.create(request("job-spot", make_offer(market="spot", zone="2")))
    assert inst.id == "cloudgpu-job-spot" and inst.market == "spot" and inst.zone == "2"
    bodies = puts(arm)
    kinds = [p.rsplit("/", 2)[-2].lower() for p, _ in bodies]
    assert kinds == [
        "resourcegroups",
        "networksecuritygroups",
        "virtualnetworks",
        "publicipaddresses",
        "networkinterfaces",
        "virtualmachines",
        "schedules",
    ]
    for _, body in bodies:
        assert body["tags"][TAG_JOB] == "job-spot" and body["tags"][TAG_OWNER] == "tester"
    nsg = bodies[1][1]["properties"]["securityRules"]
    assert [
        (r["properties"]["sourceAddressPrefix"], r["properties"]["destinationPortRange"])
        for r in nsg
    ] == [("198.51.100.7/32", "22")]
    # The size's SKU says AcceleratedNetworkingEnabled (resource_skus.list, region-filtered).
    assert bodies[4][1]["properties"]["enableAcceleratedNetworking"] is True
    vm = bodies[5][1]["properties"]
    assert (vm["priority"], vm["evictionPolicy"], vm["billingProfile"]) == (
        "Spot",
        "Delete",
        {"maxPrice": -1},
    )
    assert vm["storageProfile"]["imageReference"]["offer"] == "ubuntu-hpc"
    assert vm["storageProfile"]["osDisk"]["diskSizeGB"] == 100
    assert bodies[5][1]["zones"] == ["2"]
    # The generated key: private part 0600 on disk, public part authorized on the VM.
    assert inst.ssh is not None and inst.ssh.key_file and inst.ssh.host.startswith("20.0.0.")
    key = Path(inst.ssh.key_file)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    pub = Path(str(key) + ".pub").read_text().strip()
    assert vm["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"] == pub
    sched = bodies[6][1]["properties"]
    assert sched["taskType"] == "ComputeVmShutdownTask" and sched["timeZoneId"] == "UTC"
    assert sched["targetResourceId"].lower().endswith("/virtualmachines/job-spot")
    provider.terminate(inst.id)
    assert not key.exists()


def test_given_public_key_image_and_disk_are_used(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths)
    req = request(
        "job-img",
        image="Canonical:ubuntu-24_04-lts:server:latest",
        disk_gb=512,
        ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB user@host",
        user_data="#!/bin/sh\necho booted\n",
    )
    inst = provider.create(req)
    vm = puts(arm)[5][1]["properties"]
    assert vm["storageProfile"]["imageReference"] == {
        "publisher": "Canonical",
        "offer": "ubuntu-24_04-lts",
        "sku": "server",
        "version": "latest",
    }
    assert vm["storageProfile"]["osDisk"]["diskSizeGB"] == 512
    assert "priority" not in vm
    assert base64.b64decode(vm["osProfile"]["customData"]) == b"#!/bin/sh\necho booted\n"
    assert inst.ssh is not None and inst.ssh.key_file is None
    provider.terminate(inst.id)


def test_bad_image_is_a_config_error_before_anything_is_created(arm: FakeArm, paths: Paths) -> None:
    with pytest.raises(ConfigError, match="publisher:offer:sku:version"):
        make_provider(arm, paths).create(request("job-bad", image="not-an-image"))
    assert arm.state.groups == {}


@pytest.mark.parametrize(
    ("mode", "fixture", "error"),
    [
        ("sync", "error_sku_not_available.json", CapacityError),
        ("async", "error_allocation_failed.json", CapacityError),
        ("sync", "error_quota_exceeded.json", QuotaError),
    ],
)
def test_capacity_and_quota_errors_clean_up_the_group(
    arm: FakeArm, paths: Paths, mode: str, fixture: str, error: type[Exception]
) -> None:
    arm.state.vm_failures[H100] = (mode, fixture)
    provider = make_provider(arm, paths)
    with pytest.raises(error) as info:
        provider.create(request("job-fail", make_offer(H100)))
    assert fixture.split("_")[1].lower()[:5] in str(info.value).lower().replace("_", "")
    assert arm.state.groups == {} and arm.state.resources == {}
    assert provider.list_instances({TAG_JOB: "job-fail"}) == []


def test_throttling_is_retried(arm: FakeArm, paths: Paths) -> None:
    arm.state.throttle_next = 2
    provider = make_provider(arm, paths)
    inst = provider.create(request("job-throttle"))
    first = arm.state.requests[0][:2]  # the size's resource_skus.list: 429, 429, answered
    assert [r[:2] for r in arm.state.requests[:3]] == [first] * 3 and first[0] == "GET"
    assert len([r for r in arm.state.requests if r[0] == "PUT"]) == 7  # each resource once
    assert provider.describe(inst.id).state == InstanceState.RUNNING
    provider.terminate(inst.id)


def test_bad_token_is_an_auth_error_without_the_token(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths, token="expired-token-value")
    with pytest.raises(AuthError) as info:
        provider.create(request("job-auth"))
    assert "InvalidAuthenticationToken" in str(info.value)
    assert "expired-token-value" not in str(info.value)
    av = provider.check()
    assert not av.enabled and "InvalidAuthenticationToken" in av.reason


def test_check_makes_one_read_call(arm: FakeArm, paths: Paths) -> None:
    av = make_provider(arm, paths).check()
    assert av.enabled, av.reason
    assert [(m, p.rsplit("/", 1)[-1]) for m, p, _ in arm.state.requests] == [
        ("GET", "resourcegroups")
    ]


def test_list_pages_through_next_links_and_matches_every_tag(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths)
    a = provider.create(request("job-a"))
    b = provider.create(request("job-b"))
    arm.state.page_size = 1  # one group per page: the list needs nextLink
    found = provider.list_instances({TAG_OWNER: "tester"})
    assert sorted(i.id for i in found) == [a.id, b.id]
    assert [i.id for i in provider.list_instances({TAG_OWNER: "tester", TAG_JOB: "job-b"})] == [
        b.id
    ]
    for inst in (a, b):
        provider.terminate(inst.id)
    assert provider.list_instances({TAG_OWNER: "tester"}) == []


def test_spot_eviction_shows_as_preempted_and_group_is_still_listed(
    arm: FakeArm, paths: Paths
) -> None:
    provider = make_provider(arm, paths)
    inst = provider.create(request("job-evict", make_offer(market="spot")))
    arm.state.evict(inst.id)
    assert provider.describe(inst.id).state == InstanceState.PREEMPTED
    # The group still holds the disk-less leftovers (IP, NIC, NSG): it must stay findable.
    assert [i.id for i in provider.list_instances({TAG_JOB: "job-evict"})] == [inst.id]
    provider.terminate(inst.id)
    assert arm.state.group_resources(inst.id) == []


def test_retried_create_converges_on_the_same_group(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths)
    first = provider.create(request("job-again"))
    second = provider.create(request("job-again"))
    assert first.id == second.id and first.ssh == second.ssh
    assert len(arm.state.groups) == 1
    provider.terminate(first.id)


def test_no_schedule_when_deadline_is_far_or_disabled(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths)
    req = request("job-far")
    far = CreateRequest(**{**req.__dict__, "deadline": time.time() + 3 * 86400})
    provider.terminate(provider.create(far).id)
    off = make_provider(arm, paths, auto_shutdown=False)
    off.terminate(off.create(request("job-off")).id)
    assert not [p for p, _ in puts(arm) if "schedules" in p.lower()]


def test_bad_cidr_is_a_config_error(arm: FakeArm, paths: Paths) -> None:
    with pytest.raises(ConfigError, match="ssh_cidr"):
        make_provider(arm, paths, ssh_cidr="everyone").create(request("job-cidr"))


def test_unknown_region_is_a_clear_error_and_leaves_nothing(arm: FakeArm, paths: Paths) -> None:
    offer = Offer(**{**make_offer().to_dict(), "region": "atlantis-central"})
    with pytest.raises(NotFoundError, match="LocationNotAvailableForResourceGroup"):
        make_provider(arm, paths).create(request("job-nowhere", offer))
    assert arm.state.groups == {}


def test_failed_terminate_is_reported_and_the_group_stays_findable(
    arm: FakeArm, paths: Paths
) -> None:
    provider = make_provider(arm, paths)
    inst = provider.create(request("job-locked"))
    arm.state.locked_groups.add(inst.id)
    with pytest.raises(TransientError, match="ScopeLocked"):
        provider.terminate(inst.id)
    assert [i.id for i in provider.list_instances({TAG_OWNER: "tester"})] == [inst.id]
    arm.state.locked_groups.clear()
    provider.terminate(inst.id)  # the retry (or `down --orphans`) then succeeds
    assert provider.list_instances({TAG_OWNER: "tester"}) == []


def test_create_that_times_out_removes_what_it_made(arm: FakeArm, paths: Paths) -> None:
    arm.state.polls_for["virtualmachines"] = 40  # "Creating" for longer than the timeout
    provider = make_provider(arm, paths, create_timeout_s=0.01)
    with pytest.raises(CapacityError, match="not provisioned within"):
        provider.create(request("job-slow"))
    assert arm.state.groups == {}


def test_preemption_notice_sees_an_evicted_spot_vm(arm: FakeArm, paths: Paths) -> None:
    now = [1000.0]
    ctx = ProviderContext(
        config=provider_config(arm, notice_poll_s=10),
        paths=paths,
        env={},
        clock=lambda: now[0],
        sleep=lambda s: None,
    )
    provider = AzureProvider(ctx, credential=StaticToken())
    spot = provider.create(request("job-notice", make_offer(market="spot")))
    assert provider.preemption_notice(spot) is None
    arm.state.evict(spot.id)
    now[0] += 1  # no rate limit here: that is the lifecycle's (cloudgpu/lifecycle/watch.py)
    assert provider.preemption_notice(spot) == now[0]
    provider.terminate(spot.id)
    assert provider.preemption_notice(spot) is None  # deleted by us: not a preemption
    on_demand = provider.create(request("job-od"))
    assert provider.preemption_notice(on_demand) is None
    provider.terminate(on_demand.id)


def _arm_put(arm: FakeArm, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    ctx = ssl.create_default_context(cafile=arm.ca_bundle)
    req = urllib.request.Request(
        f"{arm.base_url}{path}?api-version=2024-07-01",
        data=json.dumps(body).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_the_fake_refuses_a_resource_type_arm_does_not_have(arm: FakeArm) -> None:
    """A strict fake: a misspelt type or namespace is ARM's InvalidResourceType, not a
    resource quietly made from some other template."""
    sub = f"/subscriptions/{arm.subscription}/resourceGroups/rg1"
    assert _arm_put(arm, sub, {"location": "eastus"})[0] in (200, 201)
    for bad in ("Microsoft.Network/virtualNetworkz/vnet", "Microsoft.Computer/virtualMachines/vm"):
        status, body = _arm_put(arm, f"{sub}/providers/{bad}", {"location": "eastus"})
        assert status == 404 and body["error"]["code"] == "InvalidResourceType", body
        assert "could not be found in the namespace" in body["error"]["message"]
    ok = _arm_put(arm, f"{sub}/providers/Microsoft.Network/virtualNetworks/vnet", {
        "location": "eastus", "properties": {"addressSpace": {"addressPrefixes": ["10.0.0.0/16"]}},
    })  # fmt: skip
    assert ok[0] in (200, 201), ok
