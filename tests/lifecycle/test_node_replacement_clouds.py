"""A lost node's replacement (provision.replace_node) on the clouds' own APIs. AWS (moto
behind the capacity proxy, which answers EC2's placement-group calls): it goes into the
live group's cluster placement group, in the survivors' zone, with its node rank; a
group with no room refuses it with EC2's capacity error. GCP (the loopback Compute
server): it goes into the group's zone naming the live compact placement policy and the
group's network tag; an exhausted zone refuses it. Either refusal leaves nothing
billing (the lifecycle then replaces the whole group: test_node_replacement.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import NODE_RANK_TAG, provision_nodes, replace_node
from cloudgpu.lifecycle.teardown import teardown_instance, teardown_job
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, Provider
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import Store
from tests.fixtures.gcp.server import FakeGCP
from tests.lifecycle.helpers import Lines
from tests.providers.aws_fixtures.account import moto_url
from tests.providers.aws_fixtures.servers import capacity_proxy, url_of
from tests.providers.aws_fixtures.setup import ec2_client, make_provider, offer
from tests.providers.gcp_kit import by_key, fake, offers, provider

__all__ = ["fake", "moto_url", "offers", "provider"]  # the fixtures, imported for pytest


def _placement(endpoint: str, ids: list[str]) -> list[dict[str, Any]]:
    out = ec2_client(endpoint).describe_instances(InstanceIds=ids)
    by_id = {i["InstanceId"]: i["Placement"] for r in out["Reservations"] for i in r["Instances"]}
    return [by_id[i] for i in ids]


def test_the_replacement_joins_the_live_cluster_placement_group(
    moto_url: str, paths: Paths, tmp_path: Path
) -> None:
    with capacity_proxy(moto_url) as proxy:
        endpoint = url_of(proxy)
        prov = make_provider(endpoint, paths, str(tmp_path))
        deps = _deps(prov, paths, tmp_path)
        store = deps.store
        job, until = JobSpec(name="j"), time.time() + 3600
        # No zone in the offer: EC2 picks one for the group; the replacement must follow.
        nodes = provision_nodes(
            deps, "j-1", job, [offer(zone="")], public_key="",
            deadline=lambda _: until, excluded=set(), count=lambda _: 2,
        )  # fmt: skip
        try:
            group = nodes[0].group
            zone = _placement(endpoint, [nodes[0].instance.id])[0]["AvailabilityZone"]
            teardown_instance(deps, store.instance(nodes[1].record_id), final_state="preempted")
            new = replace_node(deps, "j-1", job, nodes, 1, public_key="", deadline=until)
            survivor, joined = _placement(endpoint, [nodes[0].instance.id, new.instance.id])
            assert survivor["GroupName"] == joined["GroupName"] == group
            assert joined["AvailabilityZone"] == zone
            assert [g for g, _, _ in proxy.placement.placed] == [group] * 3
            assert store.instance(new.record_id).tags[NODE_RANK_TAG] == "1"
            assert new.group == group and new.offer == nodes[1].offer

            # The group has no room for one more: EC2's capacity error, nothing billing.
            teardown_instance(deps, store.instance(new.record_id), final_state="preempted")
            proxy.placement.capacity = 3
            with pytest.raises(CapacityError, match="InsufficientInstanceCapacity"):
                replace_node(deps, "j-1", job, nodes, 1, public_key="", deadline=until)
            live = [r.provider_id for r in store.instances("j-1", live_only=True)]
            assert live == [nodes[0].instance.id]
            assert [i.id for i in prov.list_instances({TAG_JOB: "j-1"})] == live
            assert store.instances("j-1")[-1].state == states.I_TERMINATED  # the refused one
        finally:
            teardown_job(deps, "j-1")
            for item in prov.leftovers({TAG_JOB: "j-1"}):
                prov.remove_leftover(item)
        assert proxy.placement.deleted == [group]


def _deps(provider: Provider, paths: Paths, tmp_path: Path) -> Deps:
    store = Store.open(tmp_path / "state.db")
    store.add_job("j-1", "j", {}, spec_path="", log_path="", state="provisioning")
    return Deps(store, lambda _: provider, paths, Lines(), "tester", connect=lambda *a, **k: None)


def test_gcp_the_replacement_names_the_live_compact_policy_in_the_group_s_zone(
    provider: Any, fake: FakeGCP, offers: list[Offer], paths: Paths, tmp_path: Path
) -> None:
    zone = "us-central1-a"
    a2 = by_key(offers)[("a2-highgpu-1g", zone, "on_demand")]
    deps = _deps(provider, paths, tmp_path)
    job, until = JobSpec(name="j"), time.time() + 3600
    nodes = provision_nodes(
        deps, "j-1", job, [a2], public_key="", deadline=lambda _: until, excluded=set(),
        count=lambda _: 2,
    )  # fmt: skip
    try:
        group = nodes[0].group
        teardown_instance(deps, deps.store.instance(nodes[0].record_id), final_state="preempted")
        new = replace_node(deps, "j-1", job, nodes, 0, public_key="", deadline=until)
        body = fake.instances[(zone, new.instance.id.split("/")[1])]["_body"]
        path = f"projects/test-project/regions/us-central1/resourcePolicies/{group}"
        assert body["resourcePolicies"] == [path] and group in body["tags"]["items"]
        assert new.instance.zone == zone and new.instance.private_address
        assert deps.store.instance(new.record_id).tags[NODE_RANK_TAG] == "0"

        # No room left in the zone for one more: Compute Engine's exhausted pool.
        teardown_instance(deps, deps.store.instance(new.record_id), final_state="preempted")
        fake.zone_capacity[zone] = 0
        with pytest.raises(CapacityError, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
            replace_node(deps, "j-1", job, nodes, 0, public_key="", deadline=until)
        live = [r.provider_id for r in deps.store.instances("j-1", live_only=True)]
        assert live == [nodes[1].instance.id]
        assert [k for k in fake.instances] == [(zone, nodes[1].instance.id.split("/")[1])]
    finally:
        teardown_job(deps, "j-1")
        for item in provider.leftovers({TAG_JOB: "j-1"}):
            provider.remove_leftover(item)
    assert fake.instances == {} and fake.policies == {} and fake.firewalls == {}
