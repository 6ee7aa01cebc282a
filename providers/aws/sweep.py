"""What `down --orphans` finds on EC2 besides instances, and the instance lease tag.

A create killed between importing its key pair / making its security group and
run_instances leaves both behind, tagged with the request's tags (launch.py tags them
as they are made). They are listed here by tag, only those named ``cloudgpu-<name>``
(nothing cloudgpu did not make), and deleted one by one. The lease is a tag a running
lifecycle moves forward (create_tags works on a live instance).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloudgpu_providers.aws.faults import Caller, cause_code
from cloudgpu_providers.aws.instances import owned_name
from cloudgpu_providers.aws.keys import remove_key_files

from cloudgpu.errors import ProviderError
from cloudgpu.provider import TAG_LEASE, Leftover

GROUP = "security group"
KEY_PAIR = "key pair"
GONE = ("InvalidGroup.NotFound", "InvalidKeyPair.NotFound")


def _filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]


def _tags(item: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags") or ()}


def leftovers(call: Caller, ec2: Any, region: str, tags: Mapping[str, str]) -> list[Leftover]:
    """cloudgpu's security groups and key pairs in ``region`` carrying all of ``tags``."""
    out = []
    groups = call(
        "describe_security_groups", ec2.describe_security_groups, Filters=_filters(tags)
    ).get("SecurityGroups", [])
    for g in groups:
        if owned_name(g.get("GroupName")):
            out.append(Leftover(GROUP, str(g["GroupId"]), _tags(g), region))
    pairs = call("describe_key_pairs", ec2.describe_key_pairs, Filters=_filters(tags)).get(
        "KeyPairs", []
    )
    for k in pairs:
        if owned_name(k.get("KeyName")):
            out.append(Leftover(KEY_PAIR, str(k["KeyName"]), _tags(k), region))
    return out


def remove(call: Caller, ec2: Any, item: Leftover, keys_dir: Path) -> None:
    """Delete one leftover; one already gone is fine."""
    try:
        if item.kind == GROUP:
            call("delete_security_group", ec2.delete_security_group, GroupId=item.id)
        else:
            call("delete_key_pair", ec2.delete_key_pair, KeyName=item.id)
    except ProviderError as err:
        if cause_code(err) not in GONE:
            raise
    name = owned_name(item.id) if item.kind == KEY_PAIR else None
    if name:
        remove_key_files(keys_dir, name)


def renew(call: Caller, ec2: Any, instance_id: str, until: float) -> None:
    call(
        "create_tags",
        ec2.create_tags,
        Resources=[instance_id],
        Tags=[{"Key": TAG_LEASE, "Value": str(int(until))}],
    )
