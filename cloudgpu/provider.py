"""The provider contract: the one interface every provider plugin implements.

A provider is a class registered in the ``cloudgpu.providers`` entry-point group (see
cloudgpu/registry.py); built-in ones (local, ssh) use the same mechanism as third-party
ones. The planner and the lifecycle only ever talk to this interface and read
:class:`Capabilities`; they never branch on a provider's name or class.

Rules for implementers:

* Import the cloud SDK lazily, inside methods, never at module level: `cloudgpu offers`
  and `--help` must not pay for it.
* Map every SDK exception at the boundary into cloudgpu.errors (AuthError, CapacityError,
  QuotaError, NotFoundError, TransientError) with ``raise ... from exc``.
* Everything :meth:`Provider.create` makes carries ``request.tags`` (job, owner, expiry),
  so :meth:`Provider.list_instances` can find it after a crash. Use
  ``request.idempotency_token`` where the API has one.
* Never put a secret into an Instance, a log line or an exception message.
"""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cloudgpu.batch import BatchJob
from cloudgpu.catalog.offer import Offer
from cloudgpu.paths import Paths
from cloudgpu.spec.fields import Node

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


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do; the lifecycle reads these instead of names."""

    spot: bool = False  # can create spot/preemptible instances
    stop: bool = False  # instances can be stopped and restarted
    multi_node: bool = False
    preemption_notice: bool = False  # instances can read an advance interruption notice
    local_nvme: bool = False  # offers may carry instance-local NVMe
    idempotent_create: bool = False  # create() honours idempotency_token
    remote: bool = True  # instances are reached over SSH (False: this machine)
    notice_poll_s: float = 10.0  # preemption_notice() at most this often (config overrides)
    billing_granularity_s: int = 1  # 1 = per second, 60 = per minute, 3600 = per hour
    minimum_billed_s: int = 0  # e.g. 60 for AWS Linux
    startup_s: float = 300.0  # typical create -> ready; the planner's guess before it has data
    # Instances are fresh VMs made for one job and thrown away: the bootstrap may RAID0 +
    # format their empty local NVMe disks and power them off at the deadline. Never set it
    # for machines the user owns, this computer, or instances sharing a host (sim).
    disposable: bool = False
    # The provider runs the whole job as one submission with no shell (cloudgpu/batch.py):
    # create() receives CreateRequest.batch and the lifecycle never connects over SSH.
    batch: bool = False
    lease_tags: bool = False  # renew_lease() updates a live instance's tags


@dataclass(frozen=True)
class Availability:
    """Whether a provider can be used now, and why (never containing a secret)."""

    enabled: bool
    reason: str
    sources: tuple[str, ...] = ()  # credential sources looked at, e.g. "env:AWS_PROFILE"
    extra: str = ""  # the pip extra that would enable it (its SDK is not installed)


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
    options: Mapping[str, Any] = field(default_factory=dict)
    batch: BatchJob | None = None  # the job itself, for Capabilities.batch providers only
    # Multi-node jobs: every node's request names the same group (DNS-safe, unique to
    # the job attempt: a placement group, a gang's name) and its own rank.
    group: str = ""
    node_rank: int = 0
    num_nodes: int = 1


@dataclass
class ProviderContext:
    """What a provider is given; it reaches nothing else global."""

    config: Mapping[str, Any]  # the [providers.NAME] table
    paths: Paths
    env: Mapping[str, str]
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


class Provider(ABC):
    """Base class of every provider plugin."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    # The keys of its [providers.NAME] table (cloudgpu.spec.fields vocabulary), checked
    # when the config is read: unknown keys get a did-you-mean. None: left unchecked.
    config_keys: ClassVar[Mapping[str, Node] | None] = None

    def __init__(self, ctx: ProviderContext) -> None:
        self.ctx = ctx

    # -- discovery -------------------------------------------------------------------

    @abstractmethod
    def availability(self) -> Availability:
        """Enabled or not, from the environment and config, without network calls."""

    def check(self) -> Availability:
        """Confirm credentials with one cheap read-only API call (may use the network).

        Default: the same as :meth:`availability`.
        """
        return self.availability()

    # -- offers ----------------------------------------------------------------------

    def offers(self) -> list[Offer]:
        """This provider's offers as the catalog knows them (snapshot or cache).

        Default: none; catalog-backed providers get theirs from cloudgpu.catalog.
        """
        return []

    def fetch_offers(self) -> list[Offer]:
        """Fetch current offers from the provider's own APIs (network)."""
        raise NotImplementedError(f"{self.name} has no live price source")

    # -- instances -------------------------------------------------------------------

    @abstractmethod
    def create(self, request: CreateRequest) -> Instance:
        """Create one instance for ``request.offer``. Raise CapacityError/QuotaError when the
        offer cannot be had now (the lifecycle fails over); clean up anything partially
        created before raising."""

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        """The nodes of one multi-node job (one offer, ranks 0..N-1), all or none: on a
        failure nothing made stays. Providers that place nodes together (placement
        groups) or gang-schedule them override it. Default: create() each in turn,
        terminating those made when one fails."""
        made: list[Instance] = []
        try:
            for request in requests:
                made.append(self.create(request))
        except BaseException:
            for inst in made:
                try:
                    self.terminate(inst.id)
                except Exception:  # the rest still go; the sweep finds what stays
                    continue
            raise
        return made

    @abstractmethod
    def describe(self, instance_id: str) -> Instance:
        """Current state; a vanished instance is TERMINATED (not NotFoundError)."""

    @abstractmethod
    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        """Instances (not yet terminated) carrying all of ``tags``."""

    @abstractmethod
    def terminate(self, instance_id: str) -> None:
        """Delete the instance and everything created with it. Idempotent."""

    def open_machine(self, instance: Instance) -> object | None:
        """A cloudgpu.remote Machine for an instance reached neither over SSH nor as a
        workdir here (a pod, through the Kubernetes exec API). None (the default): the
        lifecycle connects as the Instance's ``ssh``/``workdir`` say."""
        return None

    def renew_lease(self, instance: Instance, until: float) -> bool:
        """Set the instance's TAG_LEASE to ``until``; False where tags cannot be changed
        after create (the sweep then trusts TAG_EXPIRES)."""
        return False

    def leftovers(self, tags: Mapping[str, str]) -> list[Leftover]:
        """Resources other than instances that create() made, carrying all of ``tags``,
        that still exist (a create killed half-way leaves them). Default: none."""
        return []

    def remove_leftover(self, item: Leftover) -> None:  # noqa: B027 - optional, default none
        """Delete one of :meth:`leftovers`. Idempotent."""

    def preemption_notice(self, instance: Instance) -> float | None:
        """Unix time of a pending interruption seen from outside the instance, or None.

        The lifecycle asks at most every ``capabilities.notice_poll_s`` seconds; the
        instance-side watcher (:meth:`notice_watcher`) usually tells it sooner.
        """
        return None

    def notice_watcher(self, instance: Instance) -> NoticeWatcher | None:
        """The watcher the bootstrap installs on ``instance``, or None (no notice)."""
        return None


ProviderFactory = Callable[[ProviderContext], Provider]
