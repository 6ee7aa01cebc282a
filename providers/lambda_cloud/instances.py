"""Lambda instances <-> cloudgpu: state mapping, Instance records, launch bodies, SSH keys.

Shapes per https://docs-api.lambda.ai/api/cloud (Instance: id, name, ip, status, region
{name}, instance_type {name, price_cents_per_hour}, ssh_key_names). Must not put the API
key, or anything else secret, into an Instance.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.lambda_cloud import names

from cloudgpu.provider import CreateRequest, Instance, InstanceState, SSHTarget

PROVIDER = "lambda"

# Instance.status values (listInstances / getInstance).
_STATES = {
    "booting": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "unhealthy": InstanceState.UNKNOWN,
    "terminating": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
    "preempted": InstanceState.PREEMPTED,
}


def state_of(inst: Mapping[str, Any] | None) -> InstanceState:
    if not inst:
        return InstanceState.TERMINATED
    state = _STATES.get(str(inst.get("status") or "").lower(), InstanceState.UNKNOWN)
    # "active" can precede the address by a moment; without an IP nobody can log in yet.
    if state == InstanceState.RUNNING and not inst.get("ip"):
        return InstanceState.PENDING
    return state


def to_instance(
    inst: Mapping[str, Any] | None,
    instance_id: str,
    *,
    user: str,
    scratch: str,
    port: int = 22,
    extra_tags: Mapping[str, str] | None = None,
) -> Instance:
    if not inst:
        return Instance(id=instance_id, provider=PROVIDER, state=InstanceState.TERMINATED)
    itype = inst.get("instance_type") or {}
    region = inst.get("region") or {}
    state = state_of(inst)
    ip = inst.get("ip")
    tags = names.readable_tags(inst.get("name"))
    tags.update(extra_tags or {})
    return Instance(
        id=str(inst.get("id")),
        provider=PROVIDER,
        state=state,
        instance_type=str(itype.get("name") or ""),
        region=str(region.get("name") or ""),
        ssh=SSHTarget(host=str(ip), port=port, user=user) if ip else None,
        tags=tags,
        price_per_hour=float(itype.get("price_cents_per_hour") or 0) / 100.0,
        nvme_mount=scratch,
        extra={"name": inst.get("name"), "status": inst.get("status")},
    )


def key_name(public_key: str) -> str:
    """A stable account-level name for a public key: the same key is registered once."""
    body = " ".join(public_key.split()[:2])  # type + base64; the comment may change
    return "cloudgpu-" + hashlib.sha256(body.encode()).hexdigest()[:16]


def launch_body(
    request: CreateRequest, *, name: str, ssh_key: str, image_family: str | None
) -> dict[str, Any]:
    """The POST /instance-operations/launch body for ``request``: one instance, the
    fields of the current InstanceLaunchRequest schema (https://docs-api.lambda.ai/api/
    cloud#launchInstance), which has no ``quantity`` any more."""
    body: dict[str, Any] = {
        "region_name": request.offer.region,
        "instance_type_name": request.offer.instance_type,
        "ssh_key_names": [ssh_key],  # Lambda takes exactly one
        "name": name,
    }
    if image_family:
        body["image"] = {"family": image_family}
    if request.user_data:
        body["user_data"] = request.user_data
    return body
