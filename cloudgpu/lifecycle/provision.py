"""Provision one instance: down the ranked offers until one can be had, then wait for it.

Each attempt is recorded in the store *before* the provider's create call (state
``requested``, with an idempotency token and the cloudgpu tags), so a crash at any
moment leaves a record and a tagged resource that `down --orphans` can find. Capacity
and quota errors move on to the next offer, printing why; any other error stops.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, ProviderError, QuotaError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.select import describe_offer
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import InstanceRecord

READY_TIMEOUT_S = 900.0


@dataclass
class Provisioned:
    record_id: str  # our instance record
    provider: Provider
    instance: Instance
    offer: Offer


def provision(
    deps: Deps,
    job_id: str,
    job: JobSpec,
    offers: Sequence[Offer],
    *,
    public_key: str,
    deadline: float | None,
    expires: float,
    excluded: set[str],
) -> Provisioned:
    tried: list[str] = []
    for offer in offers:
        if offer.key in excluded:
            continue
        deps.sink.info(f"provisioning {describe_offer(offer)}")
        try:
            got = _attempt(deps, job_id, job, offer, public_key, deadline, expires)
        except (CapacityError, QuotaError) as exc:
            why = str(exc)
            deps.sink.info(f"  not available: {why}")
            deps.store.add_event(job_id, "offer_failed", f"{offer.key}: {why}")
            tried.append(f"{offer.provider} {offer.instance_type} ({why})")
            continue
        return got
    if not tried:
        raise CapacityError("no fitting offer left to try (all excluded after failures)")
    raise CapacityError(
        f"no capacity on any of {len(tried)} fitting offer(s): {'; '.join(tried)}",
        hint="retry later, allow spot or more regions/providers, or raise max_price",
    )


def _attempt(
    deps: Deps,
    job_id: str,
    job: JobSpec,
    offer: Offer,
    public_key: str,
    deadline: float | None,
    expires: float,
) -> Provisioned:
    provider = deps.provider(offer.provider)
    rec_id = f"i-{uuid.uuid4().hex[:10]}"
    tags = {
        TAG_JOB: job_id,
        TAG_OWNER: deps.owner,
        TAG_EXPIRES: str(int(expires)),
        TAG_INSTANCE: rec_id,
    }
    token = uuid.uuid4().hex
    deps.store.add_instance(_record(job_id, offer, rec_id, token, tags))
    request = CreateRequest(
        offer=offer,
        name=f"{job_id}-{rec_id[2:8]}",
        tags=tags,
        ssh_public_key=public_key,
        image=job.resources.image,
        disk_gb=job.resources.disk_gb,
        deadline=deadline,
        idempotency_token=token,
    )
    try:
        inst = provider.create(request)
    except (CapacityError, QuotaError):
        # The contract: a failed create cleaned up after itself; nothing is billing.
        deps.store.update_instance(rec_id, state=states.I_TERMINATED, terminated_at=deps.clock())
        raise
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
    got = Provisioned(rec_id, provider, inst, offer)
    got.instance = wait_running(deps, got)
    return got


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
    if inst.state != InstanceState.RUNNING:
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
    }
