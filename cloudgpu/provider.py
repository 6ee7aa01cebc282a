"""The provider contract: the one interface every provider plugin implements.

A provider is a class in the ``cloudgpu.providers`` entry-point group (cloudgpu/registry.py),
built-in ones (local, ssh) included. The planner and the lifecycle talk only to this
interface and read :class:`Capabilities`, never a provider's name or class. The values it
exchanges (Instance, CreateRequest, Availability, ProviderContext, the tags...) are in
cloudgpu.provider_types and re-exported here. The reference implementation is
``providers/sim`` (every method; real sshd instances on loopback); docs/providers.md walks
through a small one; ``cloudgpu.testing.ProviderContract`` is the suite all of them pass.

Rules: import the cloud SDK lazily, inside methods (`offers` and `--help` must not pay);
map SDK errors at the boundary into cloudgpu.errors (``raise ... from exc``); tag all
that create() makes with ``request.tags`` (list_instances finds it after a crash), use
``request.idempotency_token`` where the API has one; never put a secret in an Instance,
a log line or an exception message.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from cloudgpu.catalog.offer import Offer
from cloudgpu.spec.fields import Node

# isort: off
from cloudgpu.provider_types import (  # the contract's values, re-exported
    TAG_EXPIRES, TAG_INSTANCE, TAG_JOB, TAG_LEASE, TAG_OWNER, Availability, CreateRequest,
    Instance, InstanceState, Leftover, NoticeWatcher, ProviderContext, SSHTarget,
)  # fmt: skip
# isort: on

__all__ = [
    "TAG_EXPIRES", "TAG_INSTANCE", "TAG_JOB", "TAG_LEASE", "TAG_OWNER", "Availability",
    "Capabilities", "CreateRequest", "Instance", "InstanceState", "Leftover", "NoticeWatcher",
    "Provider", "ProviderContext", "SSHTarget",
]  # fmt: skip


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do; the core reads each (a flag nothing reads is removed)."""

    spot: bool = False  # creates spot instances (else its spot offers are not planned)
    multi_node: bool = False  # jobs of several nodes may be placed on it
    # A lost node of a multi-node job can be replaced alone: create() of a request that
    # names the live group (request.group, its node_rank, num_nodes, the survivors'
    # zone in request.offer) joins that group's placement. Else the whole group goes.
    replace_node: bool = False
    preemption_notice: bool = False  # instances get an advance interruption notice
    notice_poll_s: float = 10.0  # preemption_notice() at most this often (config overrides)
    billing_granularity_s: int = 1  # 1 = per second, 60 = per minute, 3600 = per hour
    minimum_billed_s: int = 0  # e.g. 60 for AWS Linux
    startup_s: float = 300.0  # typical create -> ready: the planner's guess before data
    # Fresh VMs made for one job and thrown away: the bootstrap may RAID0 + format their
    # empty local NVMe and power them off at the deadline. Never for machines the user
    # owns, this computer, or instances sharing a host (sim).
    disposable: bool = False
    batch: bool = False  # runs the job as one submission, no shell (cloudgpu/batch.py)
    lease_tags: bool = False  # renew_lease() updates a live instance's tags


class Provider(ABC):
    """Base class of every provider plugin. Abstract: availability, create, describe,
    list_instances, terminate; the rest have defaults a plugin overrides when it can."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    # Its [providers.NAME] keys (cloudgpu.spec.fields), checked with a did-you-mean when
    # the config is read; None: left unchecked.
    config_keys: ClassVar[Mapping[str, Node] | None] = None

    def __init__(self, ctx: ProviderContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def availability(self) -> Availability:
        """Enabled or not, from the environment and config, without network calls."""

    def check(self) -> Availability:
        """Confirm credentials with one cheap read-only call (default: availability)."""
        return self.availability()

    def offers(self) -> list[Offer]:
        """Machines it reports itself (local, ssh, sim); default none: the catalog's."""
        return []

    def fetch_offers(self) -> list[Offer]:
        """Current offers from the provider's own price APIs (network)."""
        raise NotImplementedError(f"{self.name} has no live price source")

    @abstractmethod
    def create(self, request: CreateRequest) -> Instance:
        """One instance of ``request.offer``. CapacityError/QuotaError when it cannot be
        had now (the lifecycle fails over), after cleaning up anything half-made. With
        ``request.group`` (Capabilities.replace_node): a replacement for the lost node
        ``request.node_rank`` of that group, made by create_nodes and still live; it
        joins the group's placement, or CapacityError when the placement has no room."""

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        """The nodes of one multi-node job (ranks 0..N-1), all or none. Default: create()
        each, terminating those made when one fails; override to place them together."""
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
        """A cloudgpu.remote Machine for an instance reached neither by ``ssh`` nor as a
        ``workdir`` (a pod, by the Kubernetes exec API); default None."""
        return None

    def renew_lease(self, instance: Instance, until: float) -> bool:
        """Set its TAG_LEASE to ``until``; False where tags are fixed after create."""
        return False

    def leftovers(self, tags: Mapping[str, str]) -> list[Leftover]:
        """Tagged resources besides instances that create() made and still exist."""
        return []

    def remove_leftover(self, item: Leftover) -> None:  # noqa: B027 - optional, default none
        """Delete one of :meth:`leftovers`. Idempotent."""

    def preemption_notice(self, instance: Instance) -> float | None:
        """Unix time of a pending interruption seen from outside, or None."""
        return None

    def notice_watcher(self, instance: Instance) -> NoticeWatcher | None:
        """The watcher the bootstrap installs on ``instance``, or None (no notice)."""
        return None
