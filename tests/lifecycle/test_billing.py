"""Billed time honours granularity and minimums; spend lands in the store."""

from __future__ import annotations

import pytest

from cloudgpu.lifecycle.billing import accrued, billed_seconds, cost, record_spend
from cloudgpu.paths import Paths
from cloudgpu.provider import Capabilities
from cloudgpu.state.store import InstanceRecord, Store


def test_billed_seconds() -> None:
    per_s = Capabilities(billing_granularity_s=1)
    aws = Capabilities(billing_granularity_s=1, minimum_billed_s=60)
    hourly = Capabilities(billing_granularity_s=3600)
    assert billed_seconds(0, 12.3, per_s) == 13
    assert billed_seconds(0, 12.3, aws) == 60
    assert billed_seconds(0, 75, aws) == 75
    assert billed_seconds(0, 1, hourly) == 3600
    assert billed_seconds(0, 3601, hourly) == 7200
    assert billed_seconds(10, 5, per_s) == 0
    assert cost(3.6, 100) == pytest.approx(0.1)


def test_record_spend(paths: Paths) -> None:
    store = Store.open(paths.state_db)
    rec = InstanceRecord(
        id="i-1",
        job_id="j",
        provider="sim",
        state="running",
        price_per_hour=36.0,
        launched_at=1000.0,
    )
    store.add_instance(rec)
    caps = Capabilities(minimum_billed_s=60)
    assert accrued(rec, 1010.0, caps) == pytest.approx(0.6)
    assert record_spend(store, rec, 1100.0, caps) == pytest.approx(1.0)
    (row,) = store.spend(job_id="j")
    assert row.billed_seconds == 100 and row.cost == pytest.approx(1.0)
    assert (
        record_spend(
            store, InstanceRecord(id="i-2", job_id="j", provider="x", state="requested"), 5.0, caps
        )
        == 0.0
    )
