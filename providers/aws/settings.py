"""The ``[providers.aws]`` configuration table, validated into one typed record.

Every key is optional. Bad values raise ConfigError naming the key and the expected
form. This module reads only the mapping it is given: no files, no environment, no SDK.

    [providers.aws]
    regions = ["us-east-1", "us-west-2"]   # where refresh and sweeps look
                                           # (default: every region enabled for the account)
    endpoint_url = "http://127.0.0.1:5000" # EC2/STS endpoint (e.g. a moto server)
    pricing_endpoint_url = "..."           # Price List API endpoint (default: AWS's)
    pricing_region = "us-east-1"           # the Price List API lives there
    profile = "work"                       # a named profile of ~/.aws/config
    ssh_cidr = "198.51.100.0/24"           # who may reach port 22 (default: caller /32)
    public_ip_url = "https://checkip.amazonaws.com"  # how the caller's /32 is found
    image = "ami-0123..."                  # AMI id, overrides the Deep Learning AMI rule
    image_name = "Deep Learning Base ..."  # AMI name pattern for the rule
    image_owners = ["amazon"]              # owners searched by the rule
    ssh_user = "ubuntu"
    ssh_port = 22                          # an image whose sshd listens elsewhere
    nvme_mount = "/scratch"                # where the image mounts local NVMe
    use_private_ip = false                 # SSH to the private address (VPN, bastion)
    imds_endpoint = "http://127.0.0.1:9"   # where the instance's watcher reads IMDS (tests)
    subnet_id = ["subnet-0abc", "subnet-0def"]  # launch into these (the one in the zone)
    vpc_id = "vpc-0123"                    # else a subnet of this VPC in the zone
                                           # (default: the default VPC; without one, a
                                           # subnet of the zone that maps public IPs)
    max_attempts = 6                       # attempts for throttled calls
    poll_s = 5.0                           # seconds between state polls at teardown
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudgpu.errors import ConfigError

# Documented AMI rule: AWS's Deep Learning Base AMI with the NVIDIA driver on Ubuntu
# 24.04, owned by Amazon, state available, matching the instance's architecture, newest
# CreationDate wins. Names as published in the DLAMI release notes, e.g.
# "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20260929"
# (https://docs.aws.amazon.com/dlami/latest/devguide/aws-deep-learning-ami-gpubaseossarm64-ul2404-2026-09-30.html);
# those AMIs mount instance NVMe at /opt/dlami/nvme.
DEFAULT_IMAGE_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *"
DEFAULT_IMAGE_NAME_ARM = "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *"
DLAMI_NVME_MOUNT = "/opt/dlami/nvme"
DEFAULT_PUBLIC_IP_URL = "https://checkip.amazonaws.com"


@dataclass(frozen=True)
class AwsSettings:
    regions: tuple[str, ...] = ()  # empty: every region the account has enabled
    home_region: str = "us-east-1"  # for account-wide calls (STS, describe_regions)
    endpoint_url: str | None = None
    pricing_endpoint_url: str | None = None
    pricing_region: str = "us-east-1"
    profile: str | None = None
    ssh_cidr: str | None = None
    public_ip_url: str = DEFAULT_PUBLIC_IP_URL
    image: str | None = None
    image_name: str | None = None
    image_owners: tuple[str, ...] = ("amazon",)
    ssh_user: str = "ubuntu"
    ssh_port: int = 22
    nvme_mount: str | None = None  # None: the DLAMI's mount with the default rule, else /nvme
    use_private_ip: bool = False
    subnet_ids: tuple[str, ...] = ()
    vpc_ids: tuple[str, ...] = ()
    max_attempts: int = 6
    poll_s: float = 5.0


def _str(table: Mapping[str, Any], key: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"providers.aws.{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def _str_list(table: Mapping[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = table.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f'providers.aws.{key}: expected a list of strings, e.g. ["us-east-1"]')
    return tuple(value)


def _ids(table: Mapping[str, Any], key: str, prefix: str) -> tuple[str, ...]:
    """An id or list of ids, each starting with ``prefix`` (subnet-, vpc-)."""
    ids = _str_list(table, key, ())
    bad = [i for i in ids if not i.startswith(prefix)]
    if bad:
        raise ConfigError(
            f"providers.aws.{key}: expected ids like {prefix}0123abcd, got {bad[0]!r}"
        )
    return ids


def _cidr(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError as exc:
        raise ConfigError(
            f"providers.aws.ssh_cidr: expected a CIDR such as 203.0.113.7/32, got {value!r}"
        ) from exc


def parse_settings(table: Mapping[str, Any]) -> AwsSettings:
    """Validate the ``[providers.aws]`` table."""
    attempts = table.get("max_attempts", 6)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or not 1 <= attempts <= 20:
        raise ConfigError("providers.aws.max_attempts: expected an integer from 1 to 20")
    port = table.get("ssh_port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ConfigError("providers.aws.ssh_port: expected a port number from 1 to 65535")
    poll = table.get("poll_s", 5.0)
    if not isinstance(poll, int | float) or isinstance(poll, bool) or not 0 <= poll <= 60:
        raise ConfigError("providers.aws.poll_s: expected seconds from 0 to 60")
    private = table.get("use_private_ip", False)
    if not isinstance(private, bool):
        raise ConfigError("providers.aws.use_private_ip: expected true or false")
    return AwsSettings(
        regions=_str_list(table, "regions", ()),
        home_region=(_str_list(table, "regions", ("us-east-1",)))[0],
        endpoint_url=_str(table, "endpoint_url"),
        pricing_endpoint_url=_str(table, "pricing_endpoint_url"),
        pricing_region=_str(table, "pricing_region") or "us-east-1",
        profile=_str(table, "profile"),
        ssh_cidr=_cidr(_str(table, "ssh_cidr")),
        public_ip_url=_str(table, "public_ip_url") or DEFAULT_PUBLIC_IP_URL,
        image=_str(table, "image"),
        image_name=_str(table, "image_name"),
        image_owners=_str_list(table, "image_owners", ("amazon",)),
        ssh_user=_str(table, "ssh_user") or "ubuntu",
        ssh_port=port,
        nvme_mount=_str(table, "nvme_mount"),
        use_private_ip=private,
        subnet_ids=_ids(table, "subnet_id", "subnet-"),
        vpc_ids=_ids(table, "vpc_id", "vpc-"),
        max_attempts=attempts,
        poll_s=float(poll),
    )
