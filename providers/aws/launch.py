"""The pieces of an EC2 launch: SSH ingress CIDR, AMI choice, key pair, security group
and the run_instances arguments.

Names of what is made for an instance are derived from the request's name
(``cloudgpu-<name>``), so a retried create reuses its security group (and replaces a
stale key pair) instead of making duplicates, and terminate can find them from the
instance alone. Every resource carries the request's tags. This module makes no decision
about failover or cleanup order (provider.py does) and deletes nothing but a stale key
pair it is about to replace.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from typing import Any

from cloudgpu_providers.aws.faults import PROVIDER, Caller, cause_code
from cloudgpu_providers.aws.settings import (
    DEFAULT_IMAGE_NAME,
    DEFAULT_IMAGE_NAME_ARM,
    AwsSettings,
)
from cloudgpu_providers.callerip import caller_cidr

from cloudgpu.errors import NotFoundError, ProviderError
from cloudgpu.provider import CreateRequest

NAME_PREFIX = "cloudgpu-"
TAG_TOKEN = "cloudgpu-client-token"  # finds the instance of a retried create
TAG_PRICE = "cloudgpu-price-per-hour"
TAG_NVME = "cloudgpu-nvme-mount"
# An availability zone ID ("use1-az2"): the same physical zone in every account, which
# is why the catalog uses them; zone names ("us-east-1c") are mapped per account.
ZONE_ID = re.compile(r"[a-z]{2,}[0-9]*-az[0-9]+")


@dataclass(frozen=True)
class Image:
    id: str
    root_device: str
    min_disk_gb: int  # the root snapshot's size: a smaller root volume is refused
    dlami: bool  # chosen by the default Deep Learning AMI rule


def _image(item: dict[str, Any], dlami: bool) -> Image:
    root = item.get("RootDeviceName", "/dev/sda1")
    size = 0
    for bdm in item.get("BlockDeviceMappings", []):
        if bdm.get("DeviceName") == root:
            size = int(bdm.get("Ebs", {}).get("VolumeSize", 0) or 0)
    return Image(item["ImageId"], root, size, dlami)


def resource_name(name: str) -> str:
    return f"{NAME_PREFIX}{name}"


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": str(v)} for k, v in tags.items()]


def tag_spec(resource_type: str, tags: Mapping[str, str]) -> dict[str, Any]:
    return {"ResourceType": resource_type, "Tags": tag_list(tags)}


def ssh_cidr(settings: AwsSettings, timeout: float = 5.0) -> str:
    """Who may reach port 22: the configured CIDR, else the caller's public address."""
    if settings.ssh_cidr:
        return settings.ssh_cidr
    return caller_cidr(PROVIDER, settings.public_ip_url, timeout)


def zone_name(call: Caller, ec2: Any, zone: str) -> str:
    """The account's zone name for ``zone`` (an AZ ID or already a name)."""
    if not ZONE_ID.fullmatch(zone):
        return zone
    try:
        out = call("describe_availability_zones", ec2.describe_availability_zones, ZoneIds=[zone])
    except ProviderError as err:
        if cause_code(err) in ("InvalidParameterValue", "InvalidZone.NotFound"):
            raise NotFoundError(f"zone {zone} is not in this region", provider=PROVIDER) from err
        raise
    zones = out.get("AvailabilityZones", [])
    if not zones:
        raise NotFoundError(f"zone {zone} is not in this region", provider=PROVIDER)
    return str(zones[0]["ZoneName"])


def instance_type_info(call: Caller, ec2: Any, instance_type: str) -> dict[str, Any]:
    """describe_instance_types for one type; NotFoundError when the region lacks it."""
    try:
        out = call(
            f"describe {instance_type}", ec2.describe_instance_types, InstanceTypes=[instance_type]
        )
    except ProviderError as err:
        if cause_code(err).startswith("InvalidInstanceType"):
            raise NotFoundError(
                f"instance type {instance_type} does not exist in this region",
                provider=PROVIDER,
            ) from err
        raise
    items = out.get("InstanceTypes", [])
    if not items:
        raise NotFoundError(f"instance type {instance_type} is not offered", provider=PROVIDER)
    return dict(items[0])


def resolve_image(
    call: Caller, ec2: Any, settings: AwsSettings, requested: str | None, arch: str
) -> Image:
    """The AMI to launch.

    ``requested`` (job.yaml) beats config ``image``; either may be an AMI id or a name
    pattern. Without one, the documented rule: the newest available Amazon-owned Deep
    Learning Base OSS Nvidia Driver AMI for the instance's architecture.
    """
    choice = requested or settings.image
    if choice and choice.startswith("ami-"):
        images = call("describe_images", ec2.describe_images, ImageIds=[choice]).get("Images", [])
        if not images:
            raise NotFoundError(f"image {choice} not found", provider=PROVIDER)
        return _image(images[0], False)
    default = DEFAULT_IMAGE_NAME_ARM if arch == "arm64" else DEFAULT_IMAGE_NAME
    pattern = choice or settings.image_name or default
    filters = [
        {"Name": "name", "Values": [pattern]},
        {"Name": "state", "Values": ["available"]},
    ]
    found = call(
        "describe_images",
        ec2.describe_images,
        Owners=list(settings.image_owners),
        Filters=filters,
    ).get("Images", [])
    # Architecture is checked here rather than as an API filter so an image that does
    # not declare one (private registrations may not) is not silently skipped.
    images = [i for i in found if i.get("Architecture", arch) == arch]
    if not images:
        raise NotFoundError(
            f"no {arch} image named '{pattern}' owned by {', '.join(settings.image_owners)}",
            provider=PROVIDER,
            hint="set providers.aws.image (an AMI id) or image: in job.yaml",
        )
    newest = max(images, key=lambda i: i.get("CreationDate", ""))
    return _image(newest, pattern == default)


def ensure_key_pair(
    call: Caller, ec2: Any, key_name: str, public_key: str, tags: Mapping[str, str]
) -> None:
    """Import ``public_key`` as ``key_name``.

    A pair of that name left by an earlier attempt may hold another key, so it is
    replaced; deleting a key pair never touches instances already running with it.
    """

    def _import() -> None:
        call(
            "import_key_pair",
            ec2.import_key_pair,
            KeyName=key_name,
            PublicKeyMaterial=public_key.encode(),
            TagSpecifications=[tag_spec("key-pair", tags)],
        )

    try:
        _import()
    except ProviderError as err:
        if cause_code(err) != "InvalidKeyPair.Duplicate":
            raise
        call("delete_key_pair", ec2.delete_key_pair, KeyName=key_name)
        _import()


def ensure_security_group(
    call: Caller,
    ec2: Any,
    group_name: str,
    cidr: str,
    tags: Mapping[str, str],
    vpc_id: str,
    port: int = 22,
) -> tuple[str, bool]:
    """(group id, made now) of a group in ``vpc_id`` allowing TCP ``port`` (SSH) from
    ``cidr`` only. The VPC is always named: an account without a default VPC refuses a
    group made without one."""
    try:
        out = call(
            "create_security_group",
            ec2.create_security_group,
            GroupName=group_name,
            Description=f"cloudgpu: SSH from {cidr}",
            VpcId=vpc_id,
            TagSpecifications=[tag_spec("security-group", tags)],
        )
        group_id, made = str(out["GroupId"]), True
    except ProviderError as err:
        if cause_code(err) != "InvalidGroup.Duplicate":
            raise
        found = call(
            "describe_security_groups",
            ec2.describe_security_groups,
            Filters=[
                {"Name": "group-name", "Values": [group_name]},
                {"Name": "vpc-id", "Values": [vpc_id]},
            ],
        )
        group_id, made = str(found["SecurityGroups"][0]["GroupId"]), False
    ranges = {"IpRanges": [{"CidrIp": cidr, "Description": "cloudgpu ssh"}]}
    if ":" in cidr:
        ranges = {"Ipv6Ranges": [{"CidrIpv6": cidr, "Description": "cloudgpu ssh"}]}
    try:
        call(
            "authorize_security_group_ingress",
            ec2.authorize_security_group_ingress,
            GroupId=group_id,
            IpPermissions=[{"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **ranges}],
            TagSpecifications=[tag_spec("security-group-rule", tags)],
        )
    except ProviderError as err:
        if cause_code(err) != "InvalidPermission.Duplicate":
            raise
    return group_id, made


def user_data(deadline: float | None, now: float, extra: str) -> str:
    """Boot script: power off at the deadline (which terminates: see run_args) and the
    caller's own script, each its own cloud-init part. (The spot-notice watcher is
    started by the bootstrap over SSH, as on every cloud: AWSProvider.notice_watcher.)"""
    parts: list[str] = []
    if deadline is not None:
        minutes = max(1, math.ceil((deadline - now) / 60.0))
        # A guard that holds even if cloudgpu never reaches the instance over SSH.
        parts.append(f"#!/bin/sh\nshutdown -P +{minutes} 'cloudgpu deadline'\n")
    if extra:
        parts.append(extra)
    if len(parts) <= 1:
        return parts[0] if parts else ""
    mime = MIMEMultipart()
    for i, body in enumerate(parts):
        kind = "x-shellscript" if body.startswith("#!") else "cloud-config"
        part = MIMEText(body, kind)
        part.add_header("Content-Disposition", f'attachment; filename="part-{i}"')
        mime.attach(part)
    return mime.as_string()


def run_args(
    request: CreateRequest,
    image: Image,
    key_name: str,
    placement: Mapping[str, Any],
    tags: Mapping[str, str],
    boot_script: str,
) -> dict[str, Any]:
    """Keyword arguments of ec2.run_instances for ``request``; ``placement`` puts it into
    its subnet with its security group (network.placement_args)."""
    offer = request.offer
    args: dict[str, Any] = {
        "ImageId": image.id,
        "InstanceType": offer.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "KeyName": key_name,
        **placement,
        # A shutdown from inside (the instance-side deadline) ends billing for good.
        "InstanceInitiatedShutdownBehavior": "terminate",
        "BlockDeviceMappings": [
            {
                "DeviceName": image.root_device,
                "Ebs": {
                    # Never below the image's own root snapshot, which EC2 would refuse.
                    "VolumeSize": max(int(request.disk_gb), image.min_disk_gb),
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
        ],
        # IMDSv2 only: the preemption watcher reads it with a session token.
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "TagSpecifications": [tag_spec("instance", tags), tag_spec("volume", tags)],
    }
    if request.idempotency_token:
        args["ClientToken"] = request.idempotency_token[:64]
    if boot_script:
        args["UserData"] = boot_script
    if offer.market == "spot":
        args["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
        args["TagSpecifications"].append(tag_spec("spot-instances-request", tags))
    return args
