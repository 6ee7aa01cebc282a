"""On AWS (moto behind the capacity proxy, which answers EC2's placement-group calls):
a lost node's replacement goes into the live group's cluster placement group, in the
survivors' zone, with its node rank; a placement group with no room refuses it with
EC2's capacity error and leaves nothing billing (the lifecycle then replaces the whole
group: tests/lifecycle/test_node_replacement.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cloudgpu.errors import CapacityError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import NODE_RANK_TAG, provision_nodes, replace_node
from cloudgpu.lifecycle.teardown import teardown_instance, teardown_job
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import Store
from tests.lifecycle.helpers import Lines
from tests.providers.aws_fixtures.account import moto_url
from tests.providers.aws_fixtures.servers import capacity_proxy, url_of
from tests.providers.aws_fixtures.setup import ec2_client, make_provider, offer

__all__ = ["moto_url"]  # the fixture, imported for pytest


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
        store = Store.open(tmp_path / "state.db")
        deps = Deps(store, lambda _: prov, paths, Lines(), "tester", connect=lambda *a, **k: None)
        store.add_job("j-1", "j", {}, spec_path="", log_path="", state="provisioning")
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
