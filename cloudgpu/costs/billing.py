"""The one cost function: what instances and jobs cost, as their provider bills them.

Three figures, one arithmetic:

* *billed*: a finished instance's spend row (launch price x billed seconds), written once
  by :func:`record_spend` when it is torn down;
* *so far*: a live instance's charge up to now, billed the same way (the watcher's
  max_cost check, `status`, `down --purge`);
* *estimated*: planned hours priced the same way (:func:`estimate`).

Billed seconds honour the provider's Capabilities: the billing granularity (per second,
per minute, per hour; a started step is a whole step) and the minimum billed time (AWS
and GCP bill at least a minute, Azure five). Used by the lifecycle (watcher, teardown),
`status` and the spend reports, so they cannot disagree. Arithmetic plus reads and one
write of a store handed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from cloudgpu.provider import Capabilities
from cloudgpu.state.store import InstanceRecord, SpendRecord, Store

CapsOf = Callable[[str], Capabilities]  # a provider's capabilities by name


def billed_seconds(start: float, end: float, caps: Capabilities) -> float:
    """Seconds billed for running from ``start`` to ``end`` (0 when it never ran)."""
    elapsed = max(0.0, end - start)
    if elapsed <= 0:
        return 0.0
    billed = max(elapsed, float(caps.minimum_billed_s))
    step = max(1, caps.billing_granularity_s)
    return math.ceil(billed / step - 1e-9) * step


def charge(price_per_hour: float, start: float, end: float, caps: Capabilities) -> float:
    """USD billed for one instance running from ``start`` to ``end``."""
    return price_per_hour * billed_seconds(start, end, caps) / 3600.0


def estimate(price_per_hour: float, hours: float, caps: Capabilities) -> float:
    """USD that ``hours`` of planned running will be billed."""
    return charge(price_per_hour, 0.0, max(0.0, hours) * 3600.0, caps)


def instance_cost(rec: InstanceRecord, now: float, caps: Capabilities) -> float:
    """``rec``'s cost so far, or in total once it has ended."""
    if rec.launched_at is None:
        return 0.0
    end = rec.terminated_at if rec.terminated_at is not None else now
    return charge(rec.price_per_hour, rec.launched_at, end, caps)


@dataclass(frozen=True)
class JobCost:
    billed: float  # finished instances: their spend rows
    so_far: float  # live instances: billed up to now

    @property
    def total(self) -> float:
        return self.billed + self.so_far


def job_cost(store: Store, job_id: str, now: float, caps_of: CapsOf) -> JobCost:
    """What a job has cost: recorded spend plus what its live instances have run up."""
    billed = sum(s.cost for s in store.spend(job_id=job_id))
    so_far = sum(
        instance_cost(rec, now, caps_of(rec.provider))
        for rec in store.instances(job_id, live_only=True)
    )
    return JobCost(billed, so_far)


def record_spend(store: Store, rec: InstanceRecord, end: float, caps: Capabilities) -> float:
    """Write the spend row of a finished instance; return its cost."""
    if rec.launched_at is None:
        return 0.0
    secs = billed_seconds(rec.launched_at, end, caps)
    amount = rec.price_per_hour * secs / 3600.0
    store.record_spend(
        SpendRecord(
            instance_id=rec.id,
            job_id=rec.job_id,
            provider=rec.provider,
            instance_type=rec.instance_type,
            region=rec.region,
            market=rec.market,
            gpu=rec.gpu,
            gpu_count=rec.gpu_count,
            price_per_hour=rec.price_per_hour,
            started_at=rec.launched_at,
            ended_at=end,
            billed_seconds=secs,
            cost=amount,
        )
    )
    return amount
