"""The values providers and the core exchange: whether a provider is usable, what it is
given, what an instance is and how it is reached, what to create, and the tags every
created resource carries.

Part of the provider contract (cloudgpu.provider re-exports every name here); split off
so the contract module itself stays the interface. Plain frozen data, no behaviour
beyond a state's ``is_gone``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudgpu.batch import BatchJob
from cloudgpu.catalog.offer import Offer
from cloudgpu.paths import Paths

# Tag keys put on every created resource.
TAG_JOB = "cloudgpu-job"
TAG_OWNER = "cloudgpu-owner"
TAG_EXPIRES = "cloudgpu-expires"  # unix seconds, as a string
TAG_INSTANCE = "cloudgpu-instance"  # our own id for the instance record (idempotency)
TAG_LEASE = "cloudgpu-lease"  # unix seconds a running client renews (renew_lease)


@dataclass(frozen=True)
class Leftover:
    """A tagged resource other than an instance (security group, key pair, firewall
    rule, resource group, registered SSH key) that `down --orphans` may remove."""

    kind: str  # e.g. "security group"
    id: str
    tags: Mapping[str, str] = field(default_factory=dict)
    region: str = ""


class InstanceState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    PREEMPTED = "preempted"
    TERMINATED = "terminated"
    UNKNOWN = "unknown"

    @property
    def is_gone(self) -> bool:
        return self in (InstanceState.TERMINATED, InstanceState.PREEMPTED)


@dataclass(frozen=True)
class SSHTarget:
    host: str
    port: int = 22
    user: str = "root"
    # Host key fingerprints the provider reports out of band (console output, API), in
    # OpenSSH form "SHA256:...". Empty: pin on first use and show the fingerprint.
    host_key_fingerprints: tuple[str, ...] = ()
    key_file: str | None = None  # private key path (never the key itself)
    # argv every command runs through on that host, ending where the command goes: the
    # SSH host is a gateway (a Slurm login node: srun into the job's allocation).
    launcher: tuple[str, ...] = ()


@dataclass(frozen=True)
class Instance:
    id: str
    provider: str
    state: InstanceState
    instance_type: str = ""
    region: str = ""
    zone: str = ""
    market: str = "on_demand"
    ssh: SSHTarget | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    price_per_hour: float = 0.0
    launched_at: float | None = None  # unix seconds
    ended_at: float | None = None  # when it stopped or went, where the provider says
    nvme_mount: str = "/nvme"  # where the job finds local NVMe on this instance
    workdir: str = ""  # for non-remote providers: the instance's root on this machine
    # Where the other nodes of a multi-node job reach this one (VPC address, cluster
    # hostname); "" when the provider has none.
    private_address: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoticeWatcher:
    """A script the bootstrap starts on the instance to watch the cloud's own interruption
    notice (its metadata service) and write it where the lifecycle reads it over SSH.

    The script gets CLOUDGPU_NOTICE_FILE (write the notice JSON there, atomically),
    CLOUDGPU_ADVISORY_FILE (a warning that is not yet a notice), CLOUDGPU_NOTICE_ACK
    (appears once the lifecycle has flushed the checkpoint) and CLOUDGPU_DEADLINE.
    """

    script: str  # POSIX sh
    env: Mapping[str, str] = field(default_factory=dict)  # its settings; never a secret


@dataclass(frozen=True)
class CreateRequest:
    offer: Offer
    name: str  # unique, DNS-safe
    tags: Mapping[str, str]
    ssh_public_key: str = ""  # OpenSSH one-line public key to authorize
    image: str | None = None  # provider-specific image id/family; None = documented default
    disk_gb: int = 100
    deadline: float | None = None  # unix seconds: the instance must stop billing by then
    idempotency_token: str = ""
    user_data: str = ""  # extra boot script (provider-specific injection)
    batch: BatchJob | None = None  # the job itself, for Capabilities.batch providers only
    # Multi-node jobs: every node's request names the same group (DNS-safe, unique to
    # the job attempt: a placement group, a gang's name) and its own rank.
    group: str = ""
    node_rank: int = 0
    num_nodes: int = 1


@dataclass(frozen=True)
class Availability:
    """Whether a provider can be used now, and why (never containing a secret)."""

    enabled: bool
    reason: str
    sources: tuple[str, ...] = ()  # credential sources looked at, e.g. "env:AWS_PROFILE"
    extra: str = ""  # the pip extra that would enable it (its SDK is not installed)


@dataclass
class ProviderContext:
    """What a provider is given; it reaches nothing else global."""

    config: Mapping[str, Any]  # the [providers.NAME] table
    paths: Paths
    env: Mapping[str, str]
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
