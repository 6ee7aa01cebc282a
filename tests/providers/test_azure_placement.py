"""Multi-node nodes on Azure, against the fake ARM: one resource group per job holding
one NSG (SSH from the caller, all traffic between the nodes), one virtual network, one
Standard proximity placement group that every VM names, and a public IP, NIC and VM per
node; all or none (a node that cannot be had deletes the whole group, in one call);
teardown node by node, the last taking the group; a group left without VMs is a
leftover found by tag; another owner's groups are never touched."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from cloudgpu_providers.azure.arm import ArmSettings, make_clients
from cloudgpu_providers.azure.nodes import TAG_NODES

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, QuotaError
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import provision_nodes, replace_node
from cloudgpu.lifecycle.teardown import teardown_instance, teardown_job
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, TAG_OWNER, CreateRequest, InstanceState
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import Store
from cloudgpu.testing import ProviderContract
from tests.fixtures.azure.fake_arm import FakeArm
from tests.fixtures.azure.support import StaticToken
from tests.lifecycle.helpers import Lines
from tests.providers.test_azure import A100, H100, arm, make_offer, make_provider

__all__ = ["arm"]  # the fixture, imported for pytest


def group_requests(offer: Offer, n: int, owner: str = "contract-test") -> list[CreateRequest]:
    """The contract suite's requests for each rank, of ``owner``."""
    reqs = ProviderContract().group_requests(offer, n)
    return [replace(r, tags={**r.tags, TAG_OWNER: owner}) for r in reqs]


def bodies_of(fake: FakeArm, kind: str) -> list[tuple[str, Any]]:
    return [(p, b) for m, p, b in fake.state.requests if m == "PUT" and f"/{kind}/" in p.lower()]


def test_nodes_share_one_group_network_and_placement_group(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths)
    reqs = group_requests(make_offer(H100, zone="2"), 2)
    nodes = provider.create_nodes(reqs)
    group = f"cloudgpu-{reqs[0].group}"
    assert [n.id for n in nodes] == [f"{group}/{r.name}" for r in reqs]
    (rg,) = arm.state.groups.values()
    assert rg["name"] == group and rg["tags"][TAG_NODES] == "2"
    assert TAG_INSTANCE not in rg["tags"] and rg["tags"][TAG_JOB] == reqs[0].tags[TAG_JOB]
    ((_, nsg),) = bodies_of(arm, "networksecuritygroups")
    rules = {r["name"]: r["properties"] for r in nsg["properties"]["securityRules"]}
    assert rules["ssh-from-caller"]["sourceAddressPrefix"] == "198.51.100.7/32"
    between = rules["between-nodes"]
    assert (between["sourceAddressPrefix"], between["destinationPortRange"]) == (
        "10.0.0.0/24",
        "*",
    )
    assert len(bodies_of(arm, "virtualnetworks")) == 1
    ((ppg_path, ppg),) = bodies_of(arm, "proximityplacementgroups")
    assert ppg["properties"] == {
        "proximityPlacementGroupType": "Standard",
        "intent": {"vmSizes": [H100]},
    }
    vms = bodies_of(arm, "virtualmachines")
    assert [b["properties"]["proximityPlacementGroup"]["id"].lower() for _, b in vms] == [
        ppg_path.lower()
    ] * 2
    # RdmaEnabled: one availability set in the placement group, so Azure connects the
    # nodes' InfiniBand; a set is regional, so the offer's zone is not used.
    ((avset_path, avset),) = bodies_of(arm, "availabilitysets")
    assert avset["sku"] == {"name": "Aligned"}
    assert avset["properties"]["proximityPlacementGroup"]["id"].lower() == ppg_path.lower()
    assert [b["properties"]["availabilitySet"]["id"].lower() for _, b in vms] == [
        avset_path.lower()
    ] * 2
    assert all("zones" not in b for _, b in vms) and "zones" not in ppg
    assert [b["tags"][TAG_INSTANCE] for _, b in vms] == ["i-0", "i-1"]  # each its own
    # The size's SKU says RdmaEnabled and AcceleratedNetworkingEnabled.
    nics = bodies_of(arm, "networkinterfaces")
    assert [b["properties"]["enableAcceleratedNetworking"] for _, b in nics] == [True, True]
    assert all(n.extra["infiniband"] for n in nodes)
    # Rank 0's private address is the rendezvous; each node keeps its own public one.
    assert [n.private_address for n in nodes] == ["10.0.0.4", "10.0.0.5"]
    assert len({n.ssh.host for n in nodes if n.ssh}) == 2
    assert len(bodies_of(arm, "schedules")) == 2  # the deadline on every node
    for path in (ppg_path, avset_path):
        assert len(arm.state.resources[path.lower()]["properties"]["virtualMachines"]) == 2


def test_nodes_are_listed_described_and_torn_down_one_by_one(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths)
    reqs = group_requests(make_offer(H100, market="spot"), 2)
    first, second = provider.create_nodes(reqs)
    job = reqs[0].tags[TAG_JOB]
    assert sorted(i.id for i in provider.list_instances({TAG_JOB: job})) == [first.id, second.id]
    assert [i.id for i in provider.list_instances({TAG_INSTANCE: "i-1"})] == [second.id]
    assert provider.describe(second.id).private_address == "10.0.0.5"
    assert provider.leftovers({TAG_JOB: job}) == []  # its VMs are alive
    # Spot nodes get no availability set, hence no InfiniBand; accelerated networking yes.
    nics = bodies_of(arm, "networkinterfaces")
    assert all(b["properties"]["enableAcceleratedNetworking"] for _, b in nics)
    assert not first.extra["infiniband"] and bodies_of(arm, "availabilitysets") == []
    provider.terminate(first.id)
    # Gone; a spot VM missing from a live group reads as evicted (as ARM cannot tell).
    assert provider.describe(first.id).state.is_gone
    left = {r["name"] for r in arm.state.group_resources(first.extra["resource_group"])}
    assert reqs[0].name not in left and f"{reqs[0].name}-nic" not in left
    assert {reqs[1].name, f"{reqs[1].name}-nic", f"{reqs[1].name}-ip", "ppg"} <= left
    assert second.ssh and second.ssh.key_file and Path(second.ssh.key_file).exists()
    provider.terminate(second.id)  # the last node: the whole group goes
    assert arm.state.groups == {} and arm.state.resources == {}
    assert not Path(second.ssh.key_file).exists()
    provider.terminate(second.id)  # idempotent
    assert provider.list_instances({TAG_JOB: job}) == []


@pytest.mark.parametrize(
    ("fail", "error", "code"),
    [
        ("capacity", CapacityError, "AllocationFailed"),  # the second node only
        ("quota", QuotaError, "quota"),  # refused at the first VM's PUT
    ],
)
def test_a_node_that_cannot_be_had_deletes_the_whole_group(
    arm: FakeArm, paths: Paths, fail: str, error: type[Exception], code: str
) -> None:
    if fail == "capacity":
        arm.state.capacity[("eastus", H100)] = 1
    else:
        arm.state.vm_failures[H100] = ("sync", "error_quota_exceeded.json")
    provider = make_provider(arm, paths)
    with pytest.raises(error, match=code):
        provider.create_nodes(group_requests(make_offer(H100), 2))
    assert arm.state.groups == {} and arm.state.resources == {}
    deletes = [p for m, p, _ in arm.state.requests if m == "DELETE"]
    assert len(deletes) == 1 and deletes[0].lower().count("/") == 4  # one group DELETE


def test_a_group_without_vms_is_a_leftover_of_its_owner_only(arm: FakeArm, paths: Paths) -> None:
    """Both homes' spot nodes evicted (VMs gone, evictionPolicy Delete) and their
    clients dead: each owner's sweep finds its own empty group, never the other's."""
    spot = make_offer(A100, market="spot")
    mine = make_provider(arm, paths).create_nodes(group_requests(spot, 2, owner="me"))
    theirs = make_provider(arm, paths).create_nodes(group_requests(spot, 2, owner="them"))
    provider = make_provider(arm, paths)
    for n in [*mine, *theirs]:
        arm.state.evict(n.extra["resource_group"])
    assert provider.describe(mine[0].id).state == InstanceState.PREEMPTED
    assert provider.list_instances({TAG_OWNER: "me"}) == []
    (left,) = provider.leftovers({TAG_OWNER: "me"})
    assert (left.kind, left.id) == ("resource group", mine[0].extra["resource_group"])
    assert left.tags[TAG_OWNER] == "me" and left.region == "eastus"
    provider.remove_leftover(left)
    provider.remove_leftover(left)  # idempotent
    assert set(arm.state.groups) == {theirs[0].extra["resource_group"]}
    assert provider.leftovers({TAG_OWNER: "me"}) == []
    assert [x.id for x in provider.leftovers({TAG_OWNER: "them"})] == [
        theirs[0].extra["resource_group"]
    ]


def test_single_node_requests_keep_their_own_group(arm: FakeArm, paths: Paths) -> None:
    provider = make_provider(arm, paths)
    (inst,) = provider.create_nodes(group_requests(make_offer(A100), 1))
    assert "/" not in inst.id and bodies_of(arm, "proximityplacementgroups") == []
    provider.terminate(inst.id)
    assert arm.state.groups == {}


def test_the_fake_refuses_what_arm_refuses_of_placement(arm: FakeArm) -> None:
    """A VM naming a placement group that does not exist (404) or one in another region,
    or one its availability set does not name (Compute's InvalidParameter); a NIC deleted
    while its VM uses it (NicInUse)."""
    settings = ArmSettings(base_url=arm.base_url, ca_bundle=arm.ca_bundle, polling_interval=0)
    clients = make_clients(StaticToken(), arm.subscription, settings)
    clients.resource.resource_groups.create_or_update("rg", {"location": "eastus"})
    base = f"/subscriptions/{arm.subscription}/resourceGroups/rg/providers"
    far = clients.compute.proximity_placement_groups.create_or_update(
        "rg", "far", {"location": "westeurope", "properties": {}}
    )
    vm = {"location": "eastus", "properties": {"hardwareProfile": {"vmSize": A100}}}
    missing = f"{base}/Microsoft.Compute/proximityPlacementGroups/nope"
    for ppg_id, status, code in ((missing, 404, "ResourceNotFound"),
                                 (far["id"], 400, "InvalidParameter")):  # fmt: skip
        body = {**vm, "properties": {**vm["properties"], "proximityPlacementGroup": {"id": ppg_id}}}
        with pytest.raises(HttpResponseError) as caught:
            clients.compute.virtual_machines.begin_create_or_update("rg", "vm", body)
        assert caught.value.status_code == status and caught.value.error is not None
        assert caught.value.error.code == code
    near = clients.compute.proximity_placement_groups.create_or_update(
        "rg", "near", {"location": "eastus", "properties": {}}
    )
    avset = clients.compute.availability_sets.create_or_update(
        "rg", "set", {"location": "eastus", "sku": {"name": "Aligned"},
                      "properties": {"proximityPlacementGroup": {"id": far["id"]}}},
    )  # fmt: skip
    in_set = {"availabilitySet": {"id": avset["id"]}}
    for extra, target in (({"proximityPlacementGroup": {"id": near["id"]}}, "proximity"),
                          ({}, "proximity")):  # fmt: skip
        body = {**vm, "properties": {**vm["properties"], **in_set, **extra}}
        with pytest.raises(HttpResponseError, match="InvalidParameter") as caught:
            clients.compute.virtual_machines.begin_create_or_update("rg", "vm", body)
        assert target in str(caught.value.error and caught.value.error.target).lower()
    nic = clients.network.network_interfaces.begin_create_or_update(
        "rg", "nic", {"location": "eastus", "properties": {"ipConfigurations": []}}
    ).result()
    clients.compute.virtual_machines.begin_create_or_update(
        "rg", "vm", {**vm, "properties": {**vm["properties"],
                                           "networkProfile": {"networkInterfaces": [
                                               {"id": nic["id"]}]}}},
    ).result()  # fmt: skip
    with pytest.raises(HttpResponseError, match="NicInUse"):
        clients.network.network_interfaces.begin_delete("rg", "nic").result()
    clients.compute.virtual_machines.begin_delete("rg", "vm").result()
    clients.network.network_interfaces.begin_delete("rg", "nic").result()
    assert sorted(r["name"] for r in arm.state.group_resources("rg")) == ["far", "near", "set"]


def test_a_lost_node_is_replaced_inside_the_live_group(arm: FakeArm, paths: Paths) -> None:
    """Capabilities.replace_node: the replacement joins the group's subnet, placement
    group and availability set; one that cannot be had leaves the survivors alone."""
    provider = make_provider(arm, paths)
    reqs = group_requests(make_offer(H100), 2)
    survivor, lost = provider.create_nodes(reqs)
    group = lost.extra["resource_group"]
    (rid,) = [r for r in arm.state.resources if r.endswith(f"/virtualmachines/{reqs[1].name}")]
    del arm.state.resources[rid]  # the host failed: the VM is gone
    provider.terminate(lost.id)  # the lifecycle tears the lost node down first
    assert set(arm.state.groups) == {group.lower()}
    again = replace(reqs[1], name=f"{reqs[1].name}-r", tags={**reqs[1].tags, TAG_INSTANCE: "i-r"})
    new = provider.create(again)
    assert new.id == f"{group}/{again.name}" and new.private_address == "10.0.0.6"
    assert new.extra["infiniband"] and new.tags[TAG_INSTANCE] == "i-r"
    vms = [b["properties"] for _, b in bodies_of(arm, "virtualmachines")]
    assert vms[2]["proximityPlacementGroup"] == vms[0]["proximityPlacementGroup"]
    assert vms[2]["availabilitySet"] == vms[0]["availabilitySet"]
    nic = bodies_of(arm, "networkinterfaces")[2][1]["properties"]
    assert nic["ipConfigurations"][0]["properties"]["subnet"]["id"].endswith(
        "/vnet/subnets/default"
    )
    found = provider.list_instances({TAG_JOB: reqs[0].tags[TAG_JOB]})
    assert sorted(i.id for i in found) == sorted([survivor.id, new.id])
    # No room for one more: only the newcomer's own resources go.
    arm.state.capacity[("eastus", H100)] = 2
    extra = replace(again, name=f"{reqs[1].name}-x", tags={**again.tags, TAG_INSTANCE: "i-x"})
    with pytest.raises(CapacityError, match="AllocationFailed"):
        provider.create(extra)
    names = {r["name"] for r in arm.state.group_resources(group)}
    assert not {n for n in names if n.startswith(extra.name)}
    assert {survivor.id.split("/")[1], again.name} <= names
    for n in (survivor, new):
        provider.terminate(n.id)
    assert arm.state.groups == {}
    with pytest.raises(CapacityError, match="gone"):  # the whole group went meanwhile
        provider.create(extra)
    assert not list(paths.keys_dir.glob(f"azure-{group}*"))  # no key made for it stays


def test_the_lifecycle_replaces_a_node_in_the_group_it_provisioned(
    arm: FakeArm, paths: Paths, tmp_path: Path
) -> None:
    """The lifecycle's own provision_nodes and replace_node on Azure: the node's record,
    its request (group, rank) and the provider's join agree."""
    prov = make_provider(arm, paths)
    store = Store.open(tmp_path / "state.db")
    deps = Deps(store, lambda _: prov, paths, Lines(), "tester", connect=lambda *a, **k: None)
    store.add_job("j-1", "j", {}, spec_path="", log_path="", state="provisioning")
    job, until = JobSpec(name="j"), time.time() + 3600
    nodes = provision_nodes(
        deps, "j-1", job, [make_offer(A100)], public_key="",
        deadline=lambda _: until, excluded=set(), count=lambda _: 2,
    )  # fmt: skip
    try:
        teardown_instance(deps, store.instance(nodes[1].record_id), final_state="preempted")
        new = replace_node(deps, "j-1", job, nodes, 1, public_key="", deadline=until)
        assert new.instance.extra["resource_group"] == nodes[0].instance.extra["resource_group"]
        assert new.instance.private_address == "10.0.0.6"
        live = sorted(r.provider_id for r in store.instances("j-1", live_only=True))
        assert live == sorted([nodes[0].instance.id, new.instance.id])
    finally:
        teardown_job(deps, "j-1")
    assert arm.state.groups == {}
