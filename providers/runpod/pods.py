"""RunPod pods <-> cloudgpu: GraphQL documents, tag encoding, state mapping, deploy input.

RunPod has no tags or labels. cloudgpu's tags travel in the pod's environment as one
variable, ``CLOUDGPU_TAGS`` (compact JSON), which the API returns in ``env`` of ``pod`` and
``myself { pods }``; the pod name is the job's name, for humans. ``list_instances`` filters
on the decoded variable. No secret is ever put into a pod's env by this module (the SSH
public key is public), and a pod's env is never copied into an Instance.

Deadline: RunPod has no server-side expiry. The best real option is the pod ending
itself: every pod ships ``runpodctl`` with a pod-scoped API key and ``RUNPOD_POD_ID``
(https://docs.runpod.io/runpodctl/overview), so the container start command runs
``runpodctl remove pod $RUNPOD_POD_ID`` when the deadline passes, before exec'ing the
image's own start script; the lifecycle's watcher and ``terminate`` are the second line.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cloudgpu.provider import TAG_INSTANCE, CreateRequest, Instance, InstanceState, SSHTarget

TAGS_ENV = "CLOUDGPU_TAGS"
PUBLIC_KEY_ENV = "PUBLIC_KEY"  # read by RunPod images' /start.sh into authorized_keys
# Kept in CLOUDGPU_TAGS so describe() can say what was rented; not shown as user tags.
_INTERNAL_TAGS = frozenset({"cloudgpu-instance-type", "cloudgpu-region"})

POD_FIELDS = """
    id
    name
    desiredStatus
    lastStatusChange
    imageName
    env
    gpuCount
    vcpuCount
    memoryInGb
    costPerHr
    containerDiskInGb
    machineId
    machine { gpuDisplayName maintenanceStart maintenanceEnd }
    runtime {
      uptimeInSeconds
      ports { ip isIpPublic privatePort publicPort type }
    }
"""

Q_GPU_TYPES = """
query GpuTypes {
  gpuTypes {
    id
    displayName
    memoryInGb
    maxGpuCount
    secureCloud
    communityCloud
    securePrice
    communityPrice
  }
}
"""

# Variables are declared non-null: valid whether the schema's argument is nullable or not.
Q_POD = "query Pod($input: PodFilter!) { pod(input: $input) {" + POD_FIELDS + "} }"
Q_MY_PODS = "query Pods { myself { pods {" + POD_FIELDS + "} } }"
Q_MYSELF = "query Myself { myself { id } }"
M_DEPLOY = (
    "mutation Deploy($input: PodFindAndDeployOnDemandInput!) {"
    " podFindAndDeployOnDemand(input: $input) {" + POD_FIELDS + "} }"
)
M_TERMINATE = "mutation Terminate($input: PodTerminateInput!) { podTerminate(input: $input) }"

# desiredStatus values of the PodStatus enum (graphql-spec.runpod.io).
_STATES = {
    "CREATED": InstanceState.PENDING,
    "RESTARTING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "EXITED": InstanceState.STOPPED,
    "PAUSED": InstanceState.STOPPED,
    "DEAD": InstanceState.TERMINATED,
    "TERMINATED": InstanceState.TERMINATED,
}


def encode_tags(tags: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(tags.items())), separators=(",", ":"))


def env_map(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's env as a dict; RunPod returns it as ["KEY=VALUE", ...]."""
    out: dict[str, str] = {}
    raw = pod.get("env") or []
    items = raw.items() if isinstance(raw, dict) else (str(e).partition("=")[::2] for e in raw)
    for key, value in items:
        out[str(key)] = str(value)
    return out


def decode_tags(pod: Mapping[str, Any]) -> dict[str, str]:
    raw = env_map(pod).get(TAGS_ENV)
    if not raw:
        return {}
    try:
        tags = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def ssh_target(
    pod: Mapping[str, Any], key_file: str | None, user: str = "root"
) -> SSHTarget | None:
    """RunPod maps the container's port 22 to a public port on the host's public IP."""
    runtime = pod.get("runtime") or {}
    for port in runtime.get("ports") or []:
        if port.get("privatePort") == 22 and port.get("isIpPublic") and port.get("ip"):
            return SSHTarget(
                host=str(port["ip"]), port=int(port["publicPort"]), user=user, key_file=key_file
            )
    return None


def pod_state(pod: Mapping[str, Any] | None) -> InstanceState:
    if not pod:
        return InstanceState.TERMINATED
    state = _STATES.get(str(pod.get("desiredStatus", "")).upper(), InstanceState.UNKNOWN)
    # desiredStatus flips to RUNNING at once; the container is up when runtime appears and
    # the SSH port is published.
    if state == InstanceState.RUNNING and ssh_target(pod, None) is None:
        return InstanceState.PENDING
    return state


def to_instance(
    pod: Mapping[str, Any] | None,
    pod_id: str,
    key_file: str | None,
    *,
    user: str = "root",
    scratch: str = "/workspace",
) -> Instance:
    if not pod:
        return Instance(id=pod_id, provider="runpod", state=InstanceState.TERMINATED)
    tags = decode_tags(pod)
    machine = pod.get("machine") or {}
    return Instance(
        id=str(pod["id"]),
        provider="runpod",
        state=pod_state(pod),
        instance_type=tags.get("cloudgpu-instance-type", ""),
        region=tags.get("cloudgpu-region", ""),
        ssh=ssh_target(pod, key_file, user),
        nvme_mount=scratch,
        tags={k: v for k, v in tags.items() if k not in _INTERNAL_TAGS},
        price_per_hour=float(pod.get("costPerHr") or 0.0),
        extra={
            "name": pod.get("name"),
            "desired_status": pod.get("desiredStatus"),
            "gpu": machine.get("gpuDisplayName"),
        },
    )


def maintenance_start(pod: Mapping[str, Any] | None) -> float | None:
    """Unix time a host maintenance window starts (RunPod stops the pod for it), if any.

    ``machine.maintenanceStart`` is the only advance notice RunPod publishes; it is read
    leniently (ISO 8601 or epoch seconds/milliseconds) since the schema types it loosely.
    """
    raw = ((pod or {}).get("machine") or {}).get("maintenanceStart")
    if raw in (None, "", 0):
        return None
    try:
        value = float(raw)
        return value / 1000.0 if value > 1e11 else value
    except (TypeError, ValueError):
        pass
    try:
        dt = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def start_command(deadline_in_s: float | None, image_start: str) -> str:
    """The container command: arm the self-removal, then run the image's own start."""
    if deadline_in_s is None:
        return ""
    seconds = max(60, math.ceil(deadline_in_s))
    arm = f'(sleep {seconds}; runpodctl remove pod "$RUNPOD_POD_ID") >/dev/null 2>&1 &'
    return "bash -c " + shlex.quote(f"{arm} exec {image_start}")


def deploy_input(
    request: CreateRequest,
    *,
    gpu_type_id: str,
    cloud_type: str,
    public_key: str,
    image: str,
    docker_args: str,
    data_center_id: str | None,
) -> dict[str, Any]:
    """The PodFindAndDeployOnDemandInput for ``request`` (fields as in runpod-python)."""
    offer = request.offer
    tags = dict(request.tags)
    tags["cloudgpu-instance-type"] = offer.instance_type
    tags["cloudgpu-region"] = offer.region
    if request.idempotency_token:
        tags[TAG_INSTANCE] = tags.get(TAG_INSTANCE) or request.idempotency_token
    env = [
        {"key": PUBLIC_KEY_ENV, "value": public_key},
        {"key": TAGS_ENV, "value": encode_tags(tags)},
    ]
    payload: dict[str, Any] = {
        "name": request.name,
        "imageName": image,
        "cloudType": cloud_type,
        "gpuTypeId": gpu_type_id,
        "gpuCount": max(1, offer.gpu_count),
        "minVcpuCount": max(1, int(offer.vcpus)),
        "minMemoryInGb": max(1, int(offer.memory_gb)),
        "containerDiskInGb": request.disk_gb,
        "volumeInGb": 0,
        "supportPublicIp": True,
        "startSsh": True,
        "ports": "22/tcp",
        "dockerArgs": docker_args,
        "env": env,
    }
    if data_center_id:
        payload["dataCenterId"] = data_center_id
    return payload
