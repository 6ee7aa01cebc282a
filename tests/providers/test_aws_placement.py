"""Multi-node nodes on AWS go into a cluster placement group (EFA where the instance type
has it): created and tagged before the first node, used by every node, deleted once the
nodes are gone, swept by `down --orphans` when a crash left it; a node that cannot be
had rolls back the others and the group. moto has no placement groups: the capacity
proxy in front of it answers those calls in EC2's shapes (aws_fixtures/placement.py)."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from cloudgpu_providers.aws import AWSProvider

from cloudgpu.errors import CapacityError
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_EXPIRES, TAG_INSTANCE, TAG_JOB, TAG_OWNER, CreateRequest, Leftover
from tests.providers.aws_fixtures.account import moto_url
from tests.providers.aws_fixtures.servers import capacity_proxy
from tests.providers.aws_fixtures.setup import ec2_client, make_provider, offer

__all__ = ["moto_url"]  # the fixture, imported for pytest


def group_requests(instance_type: str, n: int, zone: str = "us-east-1a") -> list[CreateRequest]:
    job = f"mn-{uuid.uuid4().hex[:8]}"
    group = f"cg-{uuid.uuid4().hex[:10]}"
    tags = {TAG_JOB: job, TAG_OWNER: "tester", TAG_EXPIRES: str(int(time.time()) + 3600)}
    base = offer(zone=zone)
    o = replace(base, instance_type=instance_type)
    return [
        CreateRequest(
            offer=o,
            name=f"{job}-{r}",
            tags={**tags, TAG_INSTANCE: f"i-{r}"},
            idempotency_token=uuid.uuid4().hex,
            deadline=time.time() + 3600,
            group=group,
            node_rank=r,
            num_nodes=n,
        )
        for r in range(n)
    ]


def test_nodes_share_a_tagged_cluster_group_with_efa_then_it_goes(
    moto_url: str, paths: Paths, tmp_path: Path
) -> None:
    with capacity_proxy(moto_url) as proxy:
        prov: AWSProvider = make_provider(
            f"http://127.0.0.1:{proxy.server_address[1]}", paths, str(tmp_path)
        )
        reqs = group_requests("p4d.24xlarge", 2)  # EFA-capable in EC2's type data
        group, job = reqs[0].group, reqs[0].tags[TAG_JOB]
        nodes = prov.create_nodes(reqs)
        pg = proxy.placement
        assert pg.groups[group]["strategy"] == "cluster"
        assert pg.groups[group]["tags"] == {
            k: v for k, v in reqs[0].tags.items() if k != TAG_INSTANCE
        }
        assert pg.placed == [(group, "p4d.24xlarge", True)] * 2
        described = ec2_client(f"http://127.0.0.1:{proxy.server_address[1]}").describe_instances(
            InstanceIds=[n.id for n in nodes]
        )
        groups = {
            i["Placement"]["GroupName"] for r in described["Reservations"] for i in r["Instances"]
        }
        assert groups == {group}
        # Still in use: the lifecycle's release waits for the nodes, the sweep sees it.
        (left,) = _groups(prov.leftovers({TAG_JOB: job}))
        assert left.id == group
        for n in nodes:
            prov.terminate(n.id)
        prov.remove_leftover(left)
        assert pg.deleted == [group] and _groups(prov.leftovers({TAG_JOB: job})) == []
        prov.remove_leftover(left)  # idempotent


def _groups(leftovers: list[Leftover]) -> list[Leftover]:
    """The placement groups among a job's leftovers (its nodes' security groups and key
    pairs are leftovers too, while the nodes live)."""
    return [x for x in leftovers if x.kind == "placement group"]


def test_a_node_refused_rolls_back_the_others_and_the_group(
    moto_url: str, paths: Paths, tmp_path: Path
) -> None:
    with capacity_proxy(moto_url) as proxy:
        prov = make_provider(f"http://127.0.0.1:{proxy.server_address[1]}", paths, str(tmp_path))
        reqs = group_requests("g5.xlarge", 3)  # no EFA on this type
        proxy.placement.capacity = 2  # the third node does not fit the group
        with pytest.raises(CapacityError, match="InsufficientInstanceCapacity"):
            prov.create_nodes(reqs)
        ec2 = ec2_client(moto_url)
        live = ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{TAG_JOB}", "Values": [reqs[0].tags[TAG_JOB]]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        assert live == []
        assert proxy.placement.deleted == [reqs[0].group] and not proxy.placement.groups
        assert all(not efa for _, _, efa in proxy.placement.placed)
