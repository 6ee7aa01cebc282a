"""Compute Engine instance and firewall bodies for a CreateRequest, and the way back.

Rules this module encodes (each documented by Google):

* Names: RFC 1035, ``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 63 characters; the firewall
  rule is ``<instance>-ssh`` so the instance name keeps 4 characters free.
* Labels: keys and values lowercase ``[a-z0-9_-]``, at most 63, keys start with a letter
  (https://cloud.google.com/compute/docs/labeling-resources). cloudgpu's tags are put
  as labels on the instance and its boot disk, and verbatim (JSON) in the metadata item
  ``cloudgpu-tags``, so a tag that labels cannot spell survives. Firewall rules have no
  labels: the tags go into the rule's description.
* Image: ``request.image``, else config ``image``, else the Deep Learning VM family
  ``common-cu129-ubuntu-2204-nvidia-580`` of project deeplearning-platform-release; a
  bare name is a family in that project, a path (``projects/...``) is used as given.
* Deadline: ``scheduling.max_run_duration`` with ``instance_termination_action=DELETE``
  (on-demand and Spot), so GCP itself deletes the VM and stops billing by the deadline.
* Spot: ``provisioning_model=SPOT``, ``instance_termination_action=DELETE``.
* SSH: the firewall rule opens the login's port (22 unless the image's sshd listens
  elsewhere) to one CIDR, for the instance's network tag only.

It must not contact the API; the provider does that.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cloudgpu_providers.gcp.pricing import compose_type

from cloudgpu.provider import CreateRequest, Instance, InstanceState, SSHTarget

DLVM_PROJECT = "deeplearning-platform-release"
DEFAULT_IMAGE_FAMILY = "common-cu129-ubuntu-2204-nvidia-580"
TAGS_METADATA = "cloudgpu-tags"
MIN_RUN_DURATION_S = 30  # GCP's lower bound for max_run_duration
_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "REPAIRING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED,
    "SUSPENDED": InstanceState.STOPPED,
    # GCP's TERMINATED is a stopped VM that still exists (and keeps its disk).
    "TERMINATED": InstanceState.STOPPED,
}


@dataclass(frozen=True)
class Login:
    """How the job reaches a VM: login user, sshd port, and where local NVMe is mounted."""

    user: str = "cloudgpu"
    port: int = 22
    nvme_mount: str = "/nvme"


def resource_name(text: str, limit: int = 59) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"cgpu-{name}"
    return name[:limit].rstrip("-")


def label_key(text: str) -> str:
    key = re.sub(r"[^a-z0-9_-]", "_", text.lower())[:63]
    return key if key and key[0].isalpha() else f"k{key}"[:63]


def label_value(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "_", text.lower())[:63]


def to_labels(tags: Mapping[str, str]) -> dict[str, str]:
    return {label_key(k): label_value(v) for k, v in tags.items()}


def label_filter(tags: Mapping[str, str]) -> str:
    """An aggregatedList filter: one parenthesized expression per label (ANDed)."""
    return " ".join(f'(labels.{k} = "{v}")' for k, v in sorted(to_labels(tags).items()))


# Machine series whose boot disk must be Hyperdisk (no Persistent Disk support):
# https://cloud.google.com/compute/docs/disks/hyperdisks#machine-type-support
_HYPERDISK_ONLY = ("a4-", "a4x-", "a3-ultragpu-", "g4-")


def default_disk_type(machine_type: str) -> str:
    return "hyperdisk-balanced" if machine_type.startswith(_HYPERDISK_ONLY) else "pd-balanced"


def image_path(request_image: str | None, config_image: str | None) -> str:
    image = request_image or config_image or DEFAULT_IMAGE_FAMILY
    if "/" in image:
        return image
    return f"projects/{DLVM_PROJECT}/global/images/family/{image}"


def request_id(token: str) -> str:
    """GCP wants a UUID; a 32-hex token is one already, anything else is hashed into one."""
    try:
        return str(uuid.UUID(token))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"cloudgpu:{token}"))


def scheduling(market: str, deadline_in_s: float | None) -> Any:
    from google.cloud import compute_v1

    sched = compute_v1.Scheduling(on_host_maintenance="TERMINATE")  # GPUs cannot migrate
    if market == "spot":
        sched.provisioning_model = "SPOT"
        sched.automatic_restart = False
        sched.instance_termination_action = "DELETE"
    else:
        sched.provisioning_model = "STANDARD"
        sched.automatic_restart = True
    if deadline_in_s is not None:
        seconds = max(MIN_RUN_DURATION_S, math.ceil(deadline_in_s))
        sched.max_run_duration = compute_v1.Duration(seconds=seconds)
        sched.instance_termination_action = "DELETE"
    return sched


def instance_metadata(request: CreateRequest, ssh_line: str) -> list[Any]:
    """The instance's metadata items: the job's key, its tags, driver and login settings."""
    from google.cloud import compute_v1

    metadata = [
        compute_v1.Items(key="ssh-keys", value=ssh_line),
        compute_v1.Items(key=TAGS_METADATA, value=json.dumps(dict(request.tags), sort_keys=True)),
        # Deep Learning VM images install the NVIDIA driver at first boot when asked.
        compute_v1.Items(key="install-nvidia-driver", value="True"),
        # With OS Login on (project metadata), ssh-keys would be ignored and the job's key
        # refused; the instance-level value wins unless an org policy enforces OS Login.
        compute_v1.Items(key="enable-oslogin", value="FALSE"),
    ]
    if request.user_data:
        metadata.append(compute_v1.Items(key="startup-script", value=request.user_data))
    return metadata


def instance_body(
    request: CreateRequest,
    *,
    name: str,
    zone: str,
    machine_type: str,
    accelerator: tuple[str, int] | None,
    ssh_line: str,
    image: str,
    network: str,
    disk_type: str,
    deadline_in_s: float | None,
    policy: str = "",
) -> Any:
    """A node of a multi-node job (``request.group``) also carries the group's network
    tag (its firewall rule between the nodes) and, given one, its placement ``policy``."""
    from google.cloud import compute_v1

    labels = to_labels(request.tags)
    metadata = instance_metadata(request, ssh_line)
    network_tags = [name, resource_name(request.group)] if request.group else [name]
    body = compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{machine_type}",
        labels=labels,
        tags=compute_v1.Tags(items=network_tags),
        metadata=compute_v1.Metadata(items=metadata),
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=image,
                    disk_size_gb=request.disk_gb,
                    disk_type=f"zones/{zone}/diskTypes/{disk_type}",
                    labels=labels,
                ),
            )
        ],
        network_interfaces=[
            compute_v1.NetworkInterface(
                network=network,
                access_configs=[
                    compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")
                ],
            )
        ],
        scheduling=scheduling(request.offer.market, deadline_in_s),
    )
    if policy:
        body.resource_policies = [policy]
    if accelerator:
        body.guest_accelerators = [
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{accelerator[0]}",
                accelerator_count=accelerator[1],
            )
        ]
    return body


def firewall_body(
    name: str,
    target_tag: str,
    cidr: str,
    network: str,
    tags: Mapping[str, str],
    port: int = 22,
) -> Any:
    from google.cloud import compute_v1

    return compute_v1.Firewall(
        name=name,
        network=network,
        direction="INGRESS",
        source_ranges=[cidr],
        target_tags=[target_tag],
        allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=[str(port)])],
        description=FIREWALL_PREFIX + json.dumps(dict(tags), sort_keys=True),
    )


FIREWALL_PREFIX = "cloudgpu ssh "  # how firewall_body's description starts


def firewall_tags(fw: Any) -> dict[str, str] | None:
    """The tags firewall_body wrote into a rule's description; None for a rule cloudgpu
    did not make (another prefix, a name not ending ``-ssh``, unreadable JSON)."""
    text = str(fw.description or "")
    if not text.startswith(FIREWALL_PREFIX) or not str(fw.name or "").endswith("-ssh"):
        return None
    try:
        raw = json.loads(text[len(FIREWALL_PREFIX) :])
    except ValueError:
        return None
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else None


def instance_tags(inst: Any) -> dict[str, str]:
    for item in inst.metadata.items if inst.metadata else []:
        if item.key == TAGS_METADATA:
            try:
                raw = json.loads(item.value)
            except ValueError:
                break
            if isinstance(raw, dict):
                return {str(k): str(v) for k, v in raw.items()}
    return dict(inst.labels)


def is_ours(inst: Any) -> bool:
    """Made by cloudgpu: it carries the cloudgpu-tags metadata item."""
    items = inst.metadata.items if inst.metadata else []
    return any(item.key == TAGS_METADATA for item in items)


def to_instance(inst: Any, zone: str, login: Login, key_file: str | None) -> Instance:
    nat_ip = private = ""
    for nic in inst.network_interfaces:
        private = private or nic.network_i_p
        for ac in nic.access_configs:
            nat_ip = nat_ip or ac.nat_i_p
    machine = inst.machine_type.rsplit("/", 1)[-1]
    accel = inst.guest_accelerators[0] if inst.guest_accelerators else None
    itype = compose_type(
        machine,
        accel.accelerator_type.rsplit("/", 1)[-1] if accel else None,
        accel.accelerator_count if accel else 0,
    )
    spot = inst.scheduling.provisioning_model == "SPOT" if inst.scheduling else False
    return Instance(
        id=f"{zone}/{inst.name}",
        provider="gcp",
        state=_STATES.get(inst.status, InstanceState.UNKNOWN),
        instance_type=itype,
        region=zone.rsplit("-", 1)[0],
        zone=zone,
        market="spot" if spot else "on_demand",
        ssh=(
            SSHTarget(host=nat_ip, port=login.port, user=login.user, key_file=key_file)
            if nat_ip
            else None
        ),
        tags=instance_tags(inst),
        nvme_mount=login.nvme_mount,
        launched_at=_timestamp(inst.creation_timestamp),
        private_address=private,
        extra={"status": inst.status, "self_link": inst.self_link},
    )


def _timestamp(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None
