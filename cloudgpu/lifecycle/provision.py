"""Provision one instance: down the ranked offers until one can be had, then wait for it.

Each attempt is recorded in the store *before* the provider's create call (state
``requested``, with an idempotency token and the cloudgpu tags), so a crash at any
moment leaves a record and a tagged resource that `down --orphans` can find. Capacity
and quota errors move on to the next offer, printing why; any other error stops. With a
:class:`Retry`, a walk that found no capacity anywhere is repeated, with growing waits,
until its deadline (`launch --retry-until-up`, `resources.retry: 2h`).
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from cloudgpu.batch import BatchJob
from cloudgpu.catalog.offer import Offer, describe_offer
from cloudgpu.errors import CapacityError, ProviderError, QuotaError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.teardown import teardown_instance
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_LEASE,
    TAG_OWNER,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)
from cloudgpu.retry import Backoff
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import InstanceRecord

READY_TIMEOUT_S = 900.0
# A multi-node job's node rank, kept in the instance record's tags only (never sent to
# the provider): `down JOB` collects each node's share by it.
NODE_RANK_TAG = "cloudgpu-node"
LEASE_S = 600.0  # a client's hold on its instance, renewed well before it runs out


@dataclass
class Provisioned:
    record_id: str  # our instance record
    provider: Provider
    instance: Instance
    offer: Offer
    deadline: float  # unix seconds: armed on the instance, its expiry tag
    group: str = ""  # a multi-node job's group (CreateRequest.group), "" for one node


@dataclass(frozen=True)
class Retry:
    """Walk the ranked offers again while none has capacity, until ``until`` (unix
    seconds; ``math.inf``: until interrupted). Waits double from ``first_s`` up to
    ``max_s``, jittered (cloudgpu.retry) so many clients do not retry in step."""

    until: float
    first_s: float = 15.0
    max_s: float = 300.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def wait(self, round_: int, now: float) -> float | None:
        """Seconds to wait after round ``round_`` failed, or None: the deadline passed."""
        left = self.until - now
        if left <= 0:
            return None
        backoff = Backoff(attempts=None, base_s=self.first_s, max_s=self.max_s, jitter=0.4)
        return min(backoff.wait_s(min(round_ - 1, 30), self.rng), left)

    def until_text(self) -> str:
        if math.isinf(self.until):
            return "until interrupted"
        return "until " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.until))


def provision(
    deps: Deps,
    job_id: str,
    job: JobSpec,
    offers: Sequence[Offer],
    *,
    public_key: str,
    deadline: Callable[[Offer], float],
    excluded: set[str],
    retry: Retry | None = None,
    batch: BatchJob | None = None,
) -> Provisioned:
    """The first offer that can be had, running. ``deadline(offer)``: when that instance
    must stop billing (armed on the instance, and its expiry tag). ``batch`` is the job
    as batch providers take it (cloudgpu/batch.py); the others never see it."""
    one = provision_nodes(
        deps, job_id, job, offers, public_key=public_key, deadline=deadline,
        excluded=excluded, retry=retry, batch=batch,
    )  # fmt: skip
    return one[0]


def provision_nodes(
    deps: Deps,
    job_id: str,
    job: JobSpec,
    offers: Sequence[Offer],
    *,
    public_key: str,
    deadline: Callable[[Offer], float],
    excluded: set[str],
    retry: Retry | None = None,
    batch: BatchJob | None = None,
    count: Callable[[Offer], int] = lambda _offer: 1,
) -> list[Provisioned]:
    """The nodes of the first offer that can be had, ``count(offer)`` of it, all or
    none (a multi-node job's nodes are one offer's: same shape, zone and placement)."""
    round_ = 1
    while True:
        if round_ > 1:
            deps.sink.info(f"round {round_}: trying the ranked offers again")
        try:
            return _walk(deps, job_id, job, offers, public_key, deadline, excluded, batch, count)
        except _NoCapacity as exc:
            if retry is None or not exc.tried:
                raise exc.error from None
            wait = retry.wait(round_, deps.clock())
            if wait is None:
                exc.error.hint = f"gave up after {round_} round(s) ({retry.until_text()})"
                raise exc.error from None
            note = f"round {round_}: no capacity on {len(exc.tried)} offer(s)"
            deps.sink.info(f"{note}; next round in {wait:.0f} s ({retry.until_text()})")
            deps.store.add_event(job_id, "retry_round", note)
            deps.sleep(wait)
            round_ += 1


class _NoCapacity(Exception):
    def __init__(self, error: CapacityError, tried: list[str]) -> None:
        self.error, self.tried = error, tried


def _walk(
    deps: Deps,
    job_id: str,
    job: JobSpec,
    offers: Sequence[Offer],
    public_key: str,
    deadline: Callable[[Offer], float],
    excluded: set[str],
    batch: BatchJob | None = None,
    count: Callable[[Offer], int] = lambda _offer: 1,
) -> list[Provisioned]:
    """One walk down the ranked offers; _NoCapacity when none could be had."""
    tried: list[str] = []
    for offer in offers:
        if offer.key in excluded:
            continue
        n = count(offer)
        if n > 1 and not deps.provider(offer.provider).capabilities.multi_node:
            deps.sink.info(f"skipping {offer.key}: {offer.provider} runs no multi-node jobs")
            continue
        deps.sink.info(f"provisioning {f'{n} x ' if n > 1 else ''}{describe_offer(offer)}")
        try:
            got = _attempt(deps, job_id, job, offer, n, public_key, deadline(offer), batch)
        except (CapacityError, QuotaError) as exc:
            why = str(exc)
            deps.sink.info(f"  not available: {why}")
            deps.store.add_event(job_id, "offer_failed", f"{offer.key}: {why}")
            tried.append(f"{offer.provider} {offer.instance_type} ({why})")
            continue
        return got
    if not tried:
        error = CapacityError("no fitting offer left to try (all excluded after failures)")
        raise _NoCapacity(error, tried)
    error = CapacityError(
        f"no capacity on any of {len(tried)} fitting offer(s): {'; '.join(tried)}",
        hint="retry later (`launch --retry-until-up`, or `resources.retry: 2h`), allow spot "
        "or more regions/providers, or raise max_price",
    )
    raise _NoCapacity(error, tried)


def _attempt(
    deps: Deps,
    job_id: str,
    job: JobSpec,
    offer: Offer,
    n: int,
    public_key: str,
    deadline: float,
    batch: BatchJob | None = None,
) -> list[Provisioned]:
    provider = deps.provider(offer.provider)
    group = f"cg-{uuid.uuid4().hex[:10]}" if n > 1 else ""
    node = _Node(job_id, job, n, group, public_key, deadline)
    requests = [
        node.request(deps, offer, provider, rank, batch if provider.capabilities.batch else None)
        for rank in range(n)
    ]
    try:
        made = provider.create_nodes(requests) if n > 1 else [provider.create(requests[0])]
    except (CapacityError, QuotaError):
        _refused(deps, requests)
        raise
    nodes = [
        _created(deps, job_id, r.tags[TAG_INSTANCE], provider, inst, offer, deadline, group)
        for r, inst in zip(requests, made, strict=True)
    ]
    _running(deps, nodes, f"{n} x {offer.instance_type}" if n > 1 else "")
    return nodes


def replace_node(
    deps: Deps,
    job_id: str,
    job: JobSpec,
    nodes: Sequence[Provisioned],
    rank: int,
    *,
    public_key: str,
    deadline: float,
) -> Provisioned:
    """A new node for the lost ``rank`` of ``nodes`` (a group create_nodes made, whose
    other nodes live on): the same offer, in the survivors' zone, joining the group's
    placement (Capabilities.replace_node). CapacityError/QuotaError when it cannot be
    had, or will not run: nothing of it is left billing."""
    lost = nodes[rank]
    survivor = next(g for r, g in enumerate(nodes) if r != rank)
    where = replace(lost.offer, zone=survivor.instance.zone or lost.offer.zone)
    node = _Node(job_id, job, len(nodes), lost.group, public_key, deadline)
    request = node.request(deps, where, lost.provider, rank, None)
    try:
        inst = lost.provider.create(request)
    except (CapacityError, QuotaError):
        _refused(deps, [request])
        raise
    rec_id = request.tags[TAG_INSTANCE]
    got = _created(deps, job_id, rec_id, lost.provider, inst, lost.offer, deadline, lost.group)
    _running(deps, [got], f"node {rank}'s replacement")
    return got


@dataclass(frozen=True)
class _Node:
    """What every node request of one group shares."""

    job_id: str
    job: JobSpec
    n: int
    group: str
    public_key: str
    deadline: float

    def request(
        self, deps: Deps, offer: Offer, provider: Provider, rank: int, batch: BatchJob | None
    ) -> CreateRequest:
        """Node ``rank``'s request, its record stored first (state ``requested``), so a
        crash at any moment leaves what `down --orphans` looks for."""
        # The lease says a client holds the instance: renewed while the lifecycle runs
        # where the provider can update tags, else good until the instance's deadline.
        lease = deps.clock() + LEASE_S if provider.capabilities.lease_tags else self.deadline
        rec_id = f"i-{uuid.uuid4().hex[:10]}"
        tags = {
            TAG_JOB: self.job_id,
            TAG_OWNER: deps.owner,
            TAG_EXPIRES: str(int(self.deadline)),
            TAG_INSTANCE: rec_id,
            TAG_LEASE: str(int(lease)),
        }
        token = uuid.uuid4().hex
        kept = {**tags, NODE_RANK_TAG: str(rank)} if self.n > 1 else tags
        deps.store.add_instance(_record(self.job_id, offer, rec_id, token, kept))
        return CreateRequest(
            offer=offer,
            name=f"{self.job_id}-{rec_id[2:8]}",
            tags=tags,
            ssh_public_key=self.public_key,
            image=self.job.resources.image,
            disk_gb=self.job.resources.disk_gb,
            deadline=self.deadline,
            idempotency_token=token,
            batch=batch,
            group=self.group,
            node_rank=rank,
            num_nodes=self.n,
        )


def _refused(deps: Deps, requests: Sequence[CreateRequest]) -> None:
    """The contract: a failed create cleaned up after itself; nothing is billing."""
    for r in requests:
        deps.store.update_instance(
            r.tags[TAG_INSTANCE], state=states.I_TERMINATED, terminated_at=deps.clock()
        )


def _running(deps: Deps, nodes: Sequence[Provisioned], group: str) -> None:
    """Wait until every node runs. Where one will not and ``group`` names them (more
    than one node, or a replacement), all of them go (verified, spend recorded) and it
    is a CapacityError: the caller moves on."""
    try:
        for got in nodes:
            got.instance = wait_running(deps, got)
    except ProviderError as exc:
        if not group:
            raise
        for got in nodes:
            teardown_instance(deps, deps.store.instance(got.record_id))
        provider = nodes[0].offer.provider
        raise CapacityError(f"{group}: {exc}", provider=provider) from exc


def _created(
    deps: Deps,
    job_id: str,
    rec_id: str,
    provider: Provider,
    inst: Instance,
    offer: Offer,
    deadline: float,
    group: str = "",
) -> Provisioned:
    deps.store.update_instance(
        rec_id,
        provider_id=inst.id,
        state=inst.state.value,
        zone=inst.zone or offer.zone,
        launched_at=inst.launched_at or deps.clock(),
        ssh=ssh_dict(inst),
        price_per_hour=inst.price_per_hour or offer.price_per_hour,
    )
    deps.store.add_event(job_id, "instance_created", f"{inst.id} ({offer.key})", rec_id)
    return Provisioned(rec_id, provider, inst, offer, deadline, group)


def _record(
    job_id: str, offer: Offer, rec_id: str, token: str, tags: dict[str, str]
) -> InstanceRecord:
    return InstanceRecord(
        id=rec_id,
        job_id=job_id,
        provider=offer.provider,
        state=states.I_REQUESTED,
        instance_type=offer.instance_type,
        region=offer.region,
        zone=offer.zone,
        market=offer.market,
        gpu=offer.gpu,
        gpu_count=offer.gpu_count,
        price_per_hour=offer.price_per_hour,
        idempotency_token=token,
        tags=tags,
    )


def wait_running(deps: Deps, got: Provisioned, timeout: float = READY_TIMEOUT_S) -> Instance:
    inst = got.instance
    waited, step = 0.0, 0.05
    while inst.state == InstanceState.PENDING and waited < timeout:
        # Short polls first: a warm pool or a sim boots in well under a second.
        deps.sleep(step)
        waited += step
        step = min(step * 1.5, 2.0)
        inst = got.provider.describe(inst.id)
    # A batch submission may have run to its end before the first poll.
    ended = got.provider.capabilities.batch and inst.state == InstanceState.STOPPED
    if inst.state != InstanceState.RUNNING and not ended:
        raise ProviderError(
            f"instance {inst.id} is {inst.state.value}, not running, after {waited:.0f} s",
            provider=got.provider.name,
        )
    fields: dict[str, object] = {"state": inst.state.value, "ssh": ssh_dict(inst)}
    if inst.launched_at:  # billing starts when the provider says the instance started
        fields["launched_at"] = inst.launched_at
    deps.store.update_instance(got.record_id, **fields)
    return inst


def ssh_dict(inst: Instance) -> dict[str, object]:
    """What the store keeps to reach an instance later (`ssh`, `exec`): never a secret."""
    if inst.ssh is None:
        return {"workdir": inst.workdir, "nvme": inst.nvme_mount}
    s = inst.ssh
    return {
        "host": s.host,
        "port": s.port,
        "user": s.user,
        "key_file": s.key_file,
        "fingerprints": list(s.host_key_fingerprints),
        "nvme": inst.nvme_mount,
        **({"launcher": list(s.launcher)} if s.launcher else {}),
        **({"address": inst.private_address} if inst.private_address else {}),
    }
