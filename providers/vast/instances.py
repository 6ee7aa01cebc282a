"""Vast instances <-> cloudgpu: labels as tags, state mapping, create bodies, deadline.

Tags: Vast's only free-text field on an instance is ``label`` (set at create, shown by
``GET /instances/``). It holds ``cgpu?`` + the tags URL-encoded, with short keys
(j=job, o=owner, e=expires, i=instance or idempotency token); instances whose label does
not start with ``cgpu?`` are someone else's and never listed.

Deadline: a Vast container gets ``CONTAINER_ID`` and ``CONTAINER_API_KEY`` (a key scoped
to that one instance) in its environment, so the ``onstart`` script arms
``sleep N; DELETE /instances/$CONTAINER_ID/`` with that key: the instance ends its own
billing even if this machine is gone. Storage is billed until destroy, so the script
destroys rather than stops; the lifecycle's watcher and terminate() are the second line.
No secret of ours is put into a label, env or onstart.
"""

from __future__ import annotations

import math
import shlex
import urllib.parse
from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.vast.offers import place_name

from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    Instance,
    InstanceState,
    SSHTarget,
)

PROVIDER = "vast"
LABEL_PREFIX = "cgpu?"
_SHORT = {TAG_JOB: "j", TAG_OWNER: "o", TAG_EXPIRES: "e", TAG_INSTANCE: "i"}
_LONG = {v: k for k, v in _SHORT.items()}

# actual_status values (https://docs.vast.ai/api-reference/instances/show-instances).
_STATES = {
    "created": InstanceState.PENDING,
    "loading": InstanceState.PENDING,
    "rebooting": InstanceState.PENDING,
    "scheduling": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopped": InstanceState.STOPPED,
    "frozen": InstanceState.STOPPED,
    "exited": InstanceState.STOPPED,
    "unknown": InstanceState.UNKNOWN,
    "offline": InstanceState.UNKNOWN,
}


def encode_label(tags: Mapping[str, str]) -> str:
    pairs = [(_SHORT.get(k, k), v) for k, v in sorted(tags.items())]
    return LABEL_PREFIX + urllib.parse.urlencode(pairs)


def decode_label(label: str | None) -> dict[str, str] | None:
    """The tags in a cloudgpu label, or None for anyone else's instance."""
    if not label or not label.startswith(LABEL_PREFIX):
        return None
    pairs = urllib.parse.parse_qsl(label[len(LABEL_PREFIX) :], keep_blank_values=True)
    return {_LONG.get(k, k): v for k, v in pairs}


def state_of(inst: Mapping[str, Any] | None) -> InstanceState:
    if not inst:
        return InstanceState.TERMINATED
    actual = str(inst.get("actual_status") or "created").lower()
    state = _STATES.get(actual, InstanceState.UNKNOWN)
    # An interruptible instance that was outbid is stopped by Vast while the user still
    # wants it running: that is a preemption.
    if (
        inst.get("is_bid")
        and state == InstanceState.STOPPED
        and str(inst.get("intended_status") or "") == "running"
    ):
        return InstanceState.PREEMPTED
    if state == InstanceState.RUNNING and not (inst.get("ssh_host") and inst.get("ssh_port")):
        return InstanceState.PENDING
    return state


def to_instance(
    inst: Mapping[str, Any] | None, instance_id: str, *, user: str, scratch: str
) -> Instance:
    if not inst:
        return Instance(id=instance_id, provider=PROVIDER, state=InstanceState.TERMINATED)
    tags = decode_label(inst.get("label")) or {}
    host, port = inst.get("ssh_host"), inst.get("ssh_port")
    return Instance(
        id=str(inst.get("id")),
        provider=PROVIDER,
        state=state_of(inst),
        instance_type=tags.pop("cloudgpu-instance-type", ""),
        region=place_name(inst.get("geolocation")),
        market="spot" if inst.get("is_bid") else "on_demand",
        ssh=SSHTarget(host=str(host), port=int(port), user=user) if host and port else None,
        tags=tags,
        price_per_hour=float(inst.get("dph_total") or 0.0),
        launched_at=float(inst["start_date"]) if inst.get("start_date") else None,
        nvme_mount=scratch,
        extra={
            "label": inst.get("label"),
            "actual_status": inst.get("actual_status"),
            "gpu": inst.get("gpu_name"),
            "machine_id": inst.get("machine_id"),
        },
    )


def onstart(deadline_in_s: float | None, api_url: str, user_data: str) -> str:
    """The onstart script: arm the self-destroy at the deadline, then the job's own boot."""
    lines = []
    if deadline_in_s is not None:
        seconds = max(60, math.ceil(deadline_in_s))
        lines.append(f"(sleep {seconds}; {destroy_self_command(api_url)}) >/dev/null 2>&1 &")
    if user_data.strip():
        lines.append("bash -c " + shlex.quote(user_data))
    return "\n".join(lines)


def destroy_self_command(api_url: str) -> str:
    """DELETE this instance with its own scoped key: curl, else python3 (images differ)."""
    url = api_url.rstrip("/") + "/instances/$CONTAINER_ID/"
    curl = f'curl -fsS -X DELETE -H "Authorization: Bearer $CONTAINER_API_KEY" "{url}"'
    py = (
        "import os,urllib.request as u;"
        "u.urlopen(u.Request(os.path.expandvars('" + url + "'),method='DELETE',"
        "headers={'Authorization':'Bearer '+os.environ['CONTAINER_API_KEY']}))"
    )
    return f"{{ {curl} || python3 -c {shlex.quote(py)}; }}"


def create_body(
    request: CreateRequest, *, label: str, image: str, onstart_cmd: str, bid: float | None
) -> dict[str, Any]:
    """The PUT /asks/{id}/ body (https://docs.vast.ai/api-reference/instances/create-instance)."""
    body: dict[str, Any] = {
        "client_id": "me",
        "image": image,
        "disk": request.disk_gb,
        "label": label,
        "runtype": "ssh",
        "onstart": onstart_cmd,
    }
    if bid is not None:
        body["price"] = bid  # an interruptible instance: our bid in $/hour
    return body
