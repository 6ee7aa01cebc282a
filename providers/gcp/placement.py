"""A multi-node job's group on Compute Engine: a compact placement policy and a firewall
rule that lets the nodes reach each other.

* Compact placement: a regional resource policy with ``groupPlacementPolicy``
  ``collocation: COLLOCATED`` and ``vmCount`` = the job's nodes; every node names it in
  ``resourcePolicies``, so Compute Engine puts the VMs close together in the zone
  (https://cloud.google.com/compute/docs/instances/placement-policies-overview and
  .../use-compact-placement-policies; API:
  https://cloud.google.com/compute/docs/reference/rest/v1/resourcePolicies). Only some
  machine series take one: of the GPU series A2, A3, A4 and G2; N1 (T4, V100, P100
  attached to N1 hosts) does not, so those nodes share only the zone.
* The rendezvous and the collective traffic (torchrun, gloo, NCCL sockets) go between
  the nodes' internal addresses on any port: a custom network may have no
  ``default-allow-internal``, so the group gets its own rule, INGRESS from the group's
  network tag to the group's network tag, tcp/udp/icmp.

Resource policies and firewall rules have no labels: the job's tags go, as JSON, into
their descriptions, which is how ``down --orphans`` finds them. Both are deleted once
the nodes are gone (a policy still used by a VM is refused: resourceInUseByAnotherResource).
It must not contact the API; the provider does that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.gcp.instances import resource_name

from cloudgpu.provider import TAG_INSTANCE

POLICY = "resource policy"
FIREWALL = "firewall rule"
_POLICY_DESC = "cloudgpu placement "
_FIREWALL_DESC = "cloudgpu nodes "
# Machine series (the type's prefix) that accept a compact placement policy, GPU ones.
COMPACT_SERIES = ("a2-", "a3-", "a4-", "g2-")


def group_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """A group's tags: the job's, without the one naming a single instance."""
    return {k: v for k, v in tags.items() if k != TAG_INSTANCE}


def compact(machine_type: str) -> bool:
    return machine_type.startswith(COMPACT_SERIES)


def policy_name(group: str) -> str:
    return resource_name(group)


def firewall_name(group: str) -> str:
    return f"{resource_name(group)}-nodes"


def policy_path(project: str, region: str, group: str) -> str:
    return f"projects/{project}/regions/{region}/resourcePolicies/{policy_name(group)}"


def policy_body(group: str, region: str, vm_count: int, tags: Mapping[str, str]) -> Any:
    from google.cloud import compute_v1

    return compute_v1.ResourcePolicy(
        name=policy_name(group),
        region=region,
        description=_POLICY_DESC + json.dumps(group_tags(tags), sort_keys=True),
        group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
            collocation="COLLOCATED", vm_count=vm_count
        ),
    )


def firewall_body(group: str, network: str, tags: Mapping[str, str]) -> Any:
    """Every port between the group's VMs (their network tag is the group's name)."""
    from google.cloud import compute_v1

    tag = resource_name(group)
    return compute_v1.Firewall(
        name=firewall_name(group),
        network=network,
        direction="INGRESS",
        source_tags=[tag],
        target_tags=[tag],
        allowed=[
            compute_v1.Allowed(I_p_protocol="tcp"),
            compute_v1.Allowed(I_p_protocol="udp"),
            compute_v1.Allowed(I_p_protocol="icmp"),
        ],
        description=_FIREWALL_DESC + json.dumps(group_tags(tags), sort_keys=True),
    )


def described_tags(description: str, kind: str) -> dict[str, str] | None:
    """The tags a policy's or rule's description carries; None when cloudgpu did not
    make it (never report, nor let a sweep delete, someone else's)."""
    prefix = _POLICY_DESC if kind == POLICY else _FIREWALL_DESC
    if not description.startswith(prefix):
        return None
    try:
        raw = json.loads(description[len(prefix) :])
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    return {str(k): str(v) for k, v in raw.items()}


def matches(found: Mapping[str, str] | None, tags: Mapping[str, str]) -> bool:
    return found is not None and all(found.get(k) == v for k, v in group_tags(tags).items())
