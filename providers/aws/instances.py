"""EC2 instances as cloudgpu sees them: state mapping, Instance records, lookups by tag,
and the teardown of one instance with what was made for it.

Teardown order matters on EC2: a security group cannot be deleted while an instance
(even a shutting-down one) still uses it, so the instance is terminated and waited for
first; then its spot request is cancelled, then the group and key pair named
``cloudgpu-<name>`` go. Every step tolerates "already gone", which makes it idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudgpu_providers.aws.faults import NOT_FOUND_SUFFIXES, PROVIDER, Caller, cause_code
from cloudgpu_providers.aws.keys import key_path
from cloudgpu_providers.aws.launch import NAME_PREFIX, TAG_NVME, TAG_PRICE
from cloudgpu_providers.aws.settings import AwsSettings

from cloudgpu.errors import ProviderError, TransientError
from cloudgpu.provider import Instance, InstanceState, SSHTarget

STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    "shutting-down": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
}
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]
# StateReason codes of an instance AWS took back (spot interruption).
PREEMPT_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")


# cloud-init prints the instance's SSH host key fingerprints to the serial console
# between these markers; EC2 serves that console through GetConsoleOutput.
_FP_BLOCK = re.compile(
    r"-----BEGIN SSH HOST KEY FINGERPRINTS-----(.*?)-----END SSH HOST KEY FINGERPRINTS-----",
    re.S,
)
_FP = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")


def console_fingerprints(call: Caller, ec2: Any, instance_id: str) -> tuple[str, ...]:
    """Host key fingerprints from the instance's console, () when not (yet) there.

    The console appears minutes after boot, or not at all without the permission:
    then the SSH layer pins the key on first use instead, so no error is raised here.
    """
    try:
        out = call("get_console_output", ec2.get_console_output, InstanceId=instance_id)
    except ProviderError:
        return ()
    found: list[str] = []
    for block in _FP_BLOCK.findall(str(out.get("Output") or "")):
        found += [fp for fp in _FP.findall(block) if fp not in found]
    return tuple(found)


def is_not_found(err: ProviderError) -> bool:
    return cause_code(err).endswith(NOT_FOUND_SUFFIXES)


def map_state(item: Mapping[str, Any]) -> InstanceState:
    state = STATES.get(item.get("State", {}).get("Name", ""), InstanceState.UNKNOWN)
    reason = item.get("StateReason", {}).get("Code", "")
    if state in (InstanceState.STOPPING, InstanceState.TERMINATED) and reason in PREEMPT_REASONS:
        return InstanceState.PREEMPTED
    return state


def tags_of(item: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", []) or []}


def owned_name(key_or_group: str | None) -> str | None:
    """The request name behind a ``cloudgpu-<name>`` resource, None for others."""
    if key_or_group and key_or_group.startswith(NAME_PREFIX):
        return key_or_group[len(NAME_PREFIX) :]
    return None


def to_instance(
    item: Mapping[str, Any], region: str, settings: AwsSettings, keys_dir: Path
) -> Instance:
    """An Instance record for one describe_instances item."""
    state, tags = map_state(item), tags_of(item)
    host = item.get("PrivateIpAddress") if settings.use_private_ip else item.get("PublicIpAddress")
    ssh = None
    if host and not state.is_gone:
        name = owned_name(item.get("KeyName"))
        key = key_path(keys_dir, name) if name else None
        ssh = SSHTarget(
            host=host,
            port=settings.ssh_port,
            user=settings.ssh_user,
            key_file=str(key) if key is not None and key.exists() else None,
        )
    launched = item.get("LaunchTime")
    try:
        price = float(tags.get(TAG_PRICE, "0"))
    except ValueError:
        price = 0.0
    return Instance(
        id=item["InstanceId"],
        provider=PROVIDER,
        state=state,
        instance_type=item.get("InstanceType", ""),
        region=region,
        zone=item.get("Placement", {}).get("AvailabilityZone", ""),
        market="spot" if item.get("InstanceLifecycle") == "spot" else "on_demand",
        ssh=ssh,
        tags=tags,
        price_per_hour=price,
        launched_at=launched.timestamp() if launched is not None else None,
        nvme_mount=tags.get(TAG_NVME, "/nvme"),
        extra={
            k: v
            for k, v in (
                ("spot_request_id", item.get("SpotInstanceRequestId")),
                ("key_name", item.get("KeyName")),
                ("security_groups", [g["GroupId"] for g in item.get("SecurityGroups", [])]),
                ("image_id", item.get("ImageId")),
            )
            if v
        },
    )


def describe_raw(call: Caller, ec2: Any, instance_id: str) -> dict[str, Any] | None:
    """The describe_instances item of ``instance_id``; None when AWS does not know it."""
    try:
        out = call("describe_instances", ec2.describe_instances, InstanceIds=[instance_id])
    except ProviderError as err:
        if is_not_found(err):
            return None
        raise
    for res in out.get("Reservations", []):
        for item in res.get("Instances", []):
            return dict(item)
    return None


def find_raw(call: Caller, ec2: Any, tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """Not-yet-terminated instances carrying all of ``tags``."""
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    filters.append({"Name": "instance-state-name", "Values": LIVE_STATES})
    items: list[dict[str, Any]] = []
    for page in call.pages(
        "describe_instances", ec2.describe_instances, "NextToken", Filters=filters
    ):
        for res in page.get("Reservations", []):
            items.extend(res.get("Instances", []))
    return items


@dataclass
class Teardown:
    """Terminates one instance and removes its spot request, group and key pair."""

    call: Caller
    ec2: Any
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    timeout_s: float = 900.0
    poll_s: float = 5.0

    def run(self, instance_id: str) -> dict[str, Any] | None:
        """Terminate and wait; returns the last describe item (None: unknown id)."""
        item = describe_raw(self.call, self.ec2, instance_id)
        if item is None:
            return None
        if item.get("State", {}).get("Name") != "terminated":
            try:
                self.call(
                    "terminate_instances", self.ec2.terminate_instances, InstanceIds=[instance_id]
                )
            except ProviderError as err:
                if not is_not_found(err):
                    raise
        self.cancel_spot(item.get("SpotInstanceRequestId"))
        item = self.wait_terminated(instance_id) or item
        self.delete_owned(item)
        return item

    def wait_terminated(self, instance_id: str) -> dict[str, Any] | None:
        deadline = self.clock() + self.timeout_s
        while True:
            item = describe_raw(self.call, self.ec2, instance_id)
            if item is None or item.get("State", {}).get("Name") == "terminated":
                return item
            if self.clock() >= deadline:
                raise TransientError(
                    f"instance {instance_id} still {item['State']['Name']} after "
                    f"{self.timeout_s:.0f} s",
                    provider=PROVIDER,
                    hint="run `cloudgpu down --orphans` later to finish the cleanup",
                )
            self.sleep(self.poll_s)

    def cancel_spot(self, request_id: str | None) -> None:
        if not request_id:
            return
        try:
            self.call(
                "cancel_spot_instance_requests",
                self.ec2.cancel_spot_instance_requests,
                SpotInstanceRequestIds=[request_id],
            )
        except ProviderError as err:
            if not is_not_found(err):
                raise

    def delete_owned(self, item: Mapping[str, Any]) -> None:
        """Delete the cloudgpu-named security groups and key pair of ``item``."""
        for group in item.get("SecurityGroups", []):
            if owned_name(group.get("GroupName")):
                self.delete_group(group["GroupId"])
        if owned_name(item.get("KeyName")):
            self.call("delete_key_pair", self.ec2.delete_key_pair, KeyName=item["KeyName"])

    def delete_group(self, group_id: str) -> None:
        # Just after termination EC2 may still count the group in use
        # (DependencyViolation) for a short while.
        for _ in range(12):
            try:
                self.call("delete_security_group", self.ec2.delete_security_group, GroupId=group_id)
                return
            except ProviderError as err:
                if is_not_found(err):
                    return
                if cause_code(err) != "DependencyViolation":
                    raise
                self.sleep(self.poll_s)
        raise TransientError(
            f"security group {group_id} still in use",
            provider=PROVIDER,
            hint="run `cloudgpu down --orphans` later",
        )

    def group_exists(self, group_id: str) -> bool:
        try:
            self.call(
                "describe_security_groups", self.ec2.describe_security_groups, GroupIds=[group_id]
            )
        except ProviderError as err:
            if is_not_found(err):
                return False
            raise
        return True

    def key_pair_exists(self, key_name: str) -> bool:
        try:
            out = self.call("describe_key_pairs", self.ec2.describe_key_pairs, KeyNames=[key_name])
        except ProviderError as err:
            if is_not_found(err):
                return False
            raise
        return bool(out.get("KeyPairs"))
