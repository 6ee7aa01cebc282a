"""Multi-node nodes on GCP: one zone, a compact placement policy (where the machine series
takes one) named by every node, a firewall rule between the nodes' network tag, both
made before the first node and removed after the last, found by `down --orphans` when a
crash left them; a node that cannot be had rolls back the others and the group."""

from __future__ import annotations

import json

import pytest
from cloudgpu_providers.gcp import GCPProvider

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, TransientError
from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, CreateRequest
from cloudgpu.testing import ProviderContract
from tests.fixtures.gcp.server import FakeGCP
from tests.providers.gcp_kit import by_key, fake, offers, provider

__all__ = ["fake", "offers", "provider"]  # the fixtures, imported for pytest

ZONE = "us-central1-a"


def job_tags(req: CreateRequest) -> dict[str, str]:
    return {k: v for k, v in req.tags.items() if k != TAG_INSTANCE}


def test_nodes_share_a_compact_policy_and_a_firewall_then_both_go(
    provider: GCPProvider, fake: FakeGCP, offers: list[Offer]
) -> None:
    a2 = by_key(offers)[("a2-highgpu-1g", ZONE, "on_demand")]
    reqs = ProviderContract().group_requests(a2, 2)
    group, job = reqs[0].group, reqs[0].tags[TAG_JOB]
    nodes = provider.create_nodes(reqs)
    policy = fake.policies[("us-central1", group)]
    assert policy["groupPlacementPolicy"] == {"collocation": "COLLOCATED", "vmCount": 2}
    assert json.loads(policy["description"].removeprefix("cloudgpu placement ")) == job_tags(
        reqs[0]
    )
    path = f"projects/test-project/regions/us-central1/resourcePolicies/{group}"
    for n in nodes:
        body = fake.instances[(ZONE, n.id.split("/")[1])]["_body"]
        assert body["resourcePolicies"] == [path]
        assert body["tags"]["items"] == [n.id.split("/")[1], group]
        assert n.zone == ZONE
    assert [n.private_address for n in nodes] == ["10.128.0.7", "10.128.0.8"]  # networkIP
    rule = fake.firewalls[f"{group}-nodes"]
    assert rule["sourceTags"] == [group] and rule["targetTags"] == [group]
    assert [a["IPProtocol"] for a in rule["allowed"]] == ["tcp", "udp", "icmp"]
    sent = next(b for b in fake.firewall_bodies if b["name"] == f"{group}-nodes")
    assert "sourceRanges" not in sent  # only the group's VMs, not the internet
    # Still in use: the policy cannot go before its VMs; the sweep sees both.
    left = provider.leftovers({TAG_JOB: job})
    assert sorted((i.kind, i.id) for i in left) == [
        ("firewall rule", f"{group}-nodes"),
        *(("firewall rule", f"{n.id.split('/')[1]}-ssh") for n in nodes),  # each VM's own
        ("resource policy", group),
    ]
    (pol,) = [i for i in left if i.kind == "resource policy"]
    assert pol.region == "us-central1" and pol.tags == job_tags(reqs[0])
    with pytest.raises(TransientError, match="still used by a VM"):
        provider.remove_leftover(pol)
    for n in nodes:
        provider.terminate(n.id)
    for item in left:
        provider.remove_leftover(item)
        provider.remove_leftover(item)  # idempotent
    assert fake.policies == {} and fake.firewalls == {} and fake.instances == {}
    assert provider.leftovers({TAG_JOB: job}) == []


def test_a_node_refused_rolls_back_the_others_and_the_group(
    provider: GCPProvider, fake: FakeGCP, offers: list[Offer]
) -> None:
    a2 = by_key(offers)[("a2-highgpu-1g", ZONE, "on_demand")]
    fake.zone_capacity[ZONE] = 2  # the third node does not fit
    with pytest.raises(CapacityError, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        provider.create_nodes(ProviderContract().group_requests(a2, 3))
    assert fake.instances == {} and fake.firewalls == {} and fake.policies == {}
    inserted = [p for m, p in fake.requests if m == "POST" and p.endswith("/instances")]
    assert len(inserted) == 3


def test_series_without_compact_placement_share_the_zone_only(
    provider: GCPProvider, fake: FakeGCP, offers: list[Offer]
) -> None:
    t4 = by_key(offers)[("n1-standard-8+2xnvidia-tesla-t4", ZONE, "on_demand")]
    reqs = ProviderContract().group_requests(t4, 2)
    nodes = provider.create_nodes(reqs)
    assert fake.policies == {}
    for n in nodes:
        assert "resourcePolicies" not in fake.instances[(ZONE, n.id.split("/")[1])]["_body"]
    assert f"{reqs[0].group}-nodes" in fake.firewalls  # the nodes still reach each other
    for n in nodes:
        provider.terminate(n.id)
    for item in provider.leftovers({TAG_JOB: reqs[0].tags[TAG_JOB]}):
        provider.remove_leftover(item)
    assert fake.firewalls == {}


def test_foreign_rules_and_policies_are_never_leftovers(
    provider: GCPProvider, fake: FakeGCP, offers: list[Offer]
) -> None:
    a2 = by_key(offers)[("a2-highgpu-1g", ZONE, "on_demand")]
    reqs = ProviderContract().group_requests(a2, 2)
    job = reqs[0].tags[TAG_JOB]
    same_tags = json.dumps(job_tags(reqs[0]))
    fake.answer(
        "POST",
        "/compute/v1/projects/test-project/global/firewalls",
        {},
        {"name": "theirs", "description": f"team rule {same_tags}", "sourceTags": ["x"]},
    )
    fake.answer("POST", "/compute/v1/projects/test-project/regions/us-central1/resourcePolicies",
                {}, {"name": "theirs", "description": "cloudgpu placement {broken",
                     "groupPlacementPolicy": {"collocation": "COLLOCATED"}})  # fmt: skip
    assert provider.leftovers({TAG_JOB: job}) == []
    assert provider.leftovers({}) == []  # nothing of ours at all
