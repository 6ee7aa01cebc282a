"""What an instance costs: launch price x billed time, as the provider bills it.

Billed time honours the provider's Capabilities (per-second vs per-minute or per-hour
granularity, minimum billed seconds). Pure arithmetic plus one store write.
"""

from __future__ import annotations

import math

from cloudgpu.provider import Capabilities
from cloudgpu.state.store import InstanceRecord, SpendRecord, Store


def billed_seconds(start: float, end: float, caps: Capabilities) -> float:
    elapsed = max(0.0, end - start)
    billed = max(elapsed, float(caps.minimum_billed_s))
    step = max(1, caps.billing_granularity_s)
    return math.ceil(billed / step) * step if billed > 0 else 0.0


def cost(price_per_hour: float, seconds: float) -> float:
    return price_per_hour * seconds / 3600.0


def accrued(rec: InstanceRecord, now: float, caps: Capabilities) -> float:
    """Cost of ``rec`` so far (or in total, once terminated)."""
    if rec.launched_at is None:
        return 0.0
    end = rec.terminated_at if rec.terminated_at is not None else now
    return cost(rec.price_per_hour, billed_seconds(rec.launched_at, end, caps))


def record_spend(store: Store, rec: InstanceRecord, end: float, caps: Capabilities) -> float:
    """Write the spend row of a finished instance; return its cost."""
    if rec.launched_at is None:
        return 0.0
    secs = billed_seconds(rec.launched_at, end, caps)
    amount = cost(rec.price_per_hour, secs)
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
