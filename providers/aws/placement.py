"""Cluster placement groups for multi-node jobs, and EFA where the instance type has it.

A multi-node job's nodes go into one placement group with the ``cluster`` strategy (one
AZ, low-latency, high-bandwidth: what distributed training wants), created by
create_nodes before the first node and tagged like everything else (job, owner,
expiry), so `down --orphans` finds one a crash left (Provider.leftovers). It is deleted
once its instances are gone: EC2 refuses to delete a group still in use
(InvalidPlacementGroup.InUse), which is then retried by the next sweep.

Instance types whose NetworkInfo says ``EfaSupported`` get their primary interface as
``InterfaceType: efa`` (an EFA must be set on the interface: the subnet and groups then
live there, as placement_args does for public addresses).

API: CreatePlacementGroup / DescribePlacementGroups / DeletePlacementGroup
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html),
EFA (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.aws.faults import Caller, cause_code
from cloudgpu_providers.aws.launch import tag_spec

from cloudgpu.errors import ProviderError, TransientError
from cloudgpu.provider import TAG_INSTANCE

KIND = "placement group"
LIVE_STATES = ["pending", "running", "shutting-down", "stopping", "stopped"]


def group_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """A group's tags: the job's, without the one naming a single instance."""
    return {k: v for k, v in tags.items() if k != TAG_INSTANCE}


def create(call: Caller, ec2: Any, name: str, tags: Mapping[str, str]) -> None:
    """The group, tagged; one that exists already (a retried create) is kept."""
    try:
        call(
            "create_placement_group",
            ec2.create_placement_group,
            GroupName=name,
            Strategy="cluster",
            TagSpecifications=[tag_spec("placement-group", group_tags(tags))],
        )
    except ProviderError as exc:
        if cause_code(exc) != "InvalidPlacementGroup.Duplicate":
            raise


def tagged(call: Caller, ec2: Any, tags: Mapping[str, str]) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in group_tags(tags).items()]
    out = call("describe_placement_groups", ec2.describe_placement_groups, Filters=filters)
    return list(out.get("PlacementGroups", []))


def in_use(call: Caller, ec2: Any, name: str) -> bool:
    filters = [
        {"Name": "placement-group-name", "Values": [name]},
        {"Name": "instance-state-name", "Values": LIVE_STATES},
    ]
    out = call("describe_instances", ec2.describe_instances, Filters=filters)
    return any(r.get("Instances") for r in out.get("Reservations", []))


def delete(call: Caller, ec2: Any, name: str) -> None:
    """Delete the group; idempotent. Still in use: a transient error (retry later)."""
    if in_use(call, ec2, name):
        raise TransientError(f"placement group {name} still has instances", provider="aws")
    try:
        call("delete_placement_group", ec2.delete_placement_group, GroupName=name)
    except ProviderError as exc:
        code = cause_code(exc)
        if code == "InvalidPlacementGroup.Unknown":
            return
        if code == "InvalidPlacementGroup.InUse":
            raise TransientError(f"placement group {name} is in use", provider="aws") from exc
        raise


def efa_interface(args: dict[str, Any]) -> dict[str, Any]:
    """run_instances arguments with the primary interface an EFA one."""
    out = dict(args)
    if "NetworkInterfaces" in out:
        nic = {**out["NetworkInterfaces"][0], "InterfaceType": "efa"}
    else:
        nic = {
            "DeviceIndex": 0,
            "SubnetId": out.pop("SubnetId"),
            "Groups": out.pop("SecurityGroupIds"),
            "DeleteOnTermination": True,
            "InterfaceType": "efa",
        }
    out["NetworkInterfaces"] = [nic]
    return out


def placed(args: dict[str, Any], group: str) -> dict[str, Any]:
    """run_instances arguments that put the instance into ``group``."""
    return {**args, "Placement": {**args.get("Placement", {}), "GroupName": group}}
