"""The one cost function: billed time honours granularity and minimums, and the watcher,
`status` and the spend rows agree on what a job cost."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from cloudgpu_providers.lambda_cloud import LambdaProvider

from cloudgpu.cli import cli
from cloudgpu.costs.billing import (
    billed_seconds,
    charge,
    estimate,
    instance_cost,
    job_cost,
    record_spend,
)
from cloudgpu.paths import Paths
from cloudgpu.provider import Capabilities
from cloudgpu.state.store import InstanceRecord, Store

PER_S = Capabilities(billing_granularity_s=1)
AWS = Capabilities(billing_granularity_s=1, minimum_billed_s=60)
PER_MIN = Capabilities(billing_granularity_s=60)
HOURLY = Capabilities(billing_granularity_s=3600)


def test_billed_seconds() -> None:
    assert billed_seconds(0, 12.3, PER_S) == 13
    assert billed_seconds(0, 12.3, AWS) == 60
    assert billed_seconds(0, 75, AWS) == 75
    assert billed_seconds(0, 61, PER_MIN) == 120
    assert billed_seconds(0, 60, PER_MIN) == 60
    assert billed_seconds(0, 1, HOURLY) == 3600
    assert billed_seconds(0, 3601, HOURLY) == 7200
    assert billed_seconds(10, 5, PER_S) == 0  # never ran: nothing billed, not the minimum
    assert charge(3.6, 0, 100, PER_S) == pytest.approx(0.1)
    assert estimate(3.6, 1.5, HOURLY) == pytest.approx(7.2)  # a started hour is an hour


def _store(paths: Paths) -> Store:
    store = Store.open(paths.state_db)
    store.add_job("j", "j", {})
    return store


def test_record_spend_and_so_far(paths: Paths) -> None:
    store = _store(paths)
    rec = InstanceRecord(
        id="i-1", job_id="j", provider="sim", state="running", price_per_hour=36.0,
        launched_at=1000.0,
    )  # fmt: skip
    store.add_instance(rec)
    caps = Capabilities(minimum_billed_s=60)
    assert instance_cost(rec, 1010.0, caps) == pytest.approx(0.6)  # the minute minimum
    assert record_spend(store, rec, 1100.0, caps) == pytest.approx(1.0)
    (row,) = store.spend(job_id="j")
    assert row.billed_seconds == 100 and row.cost == pytest.approx(1.0)
    requested = InstanceRecord(id="i-2", job_id="j", provider="x", state="requested")
    assert record_spend(store, requested, 5.0, caps) == 0.0


def test_job_cost_adds_billed_and_so_far_by_each_providers_granularity(paths: Paths) -> None:
    store = _store(paths)
    done = InstanceRecord(
        id="i-1", job_id="j", provider="aws", state="terminated", price_per_hour=3.6,
        launched_at=0.0, terminated_at=10.0,
    )  # fmt: skip
    live = InstanceRecord(
        id="i-2", job_id="j", provider="lambda", state="running", price_per_hour=3.6,
        launched_at=100.0,
    )  # fmt: skip
    store.add_instance(done)
    store.add_instance(live)
    record_spend(store, done, 10.0, AWS)
    caps = {"aws": AWS, "lambda": PER_MIN}
    cost = job_cost(store, "j", 161.0, caps.__getitem__)
    assert cost.billed == pytest.approx(0.06)  # 60 s minimum
    assert cost.so_far == pytest.approx(0.12)  # 61 s billed as 2 started minutes
    assert cost.total == pytest.approx(0.18)


def test_status_bills_a_live_instance_as_its_provider_does(paths: Paths) -> None:
    """`status` used plain per-second accrual; Lambda bills started minutes."""
    store = _store(paths)
    store.add_instance(
        InstanceRecord(
            id="i-1", job_id="j", provider="lambda", state="running", price_per_hour=3.6,
            launched_at=time.time() - 61,  # a minute and a bit: two started minutes
        )
    )  # fmt: skip
    store.close()
    res = CliRunner().invoke(cli, ["status", "--json"], catch_exceptions=False)
    (row,) = json.loads(res.stdout)
    assert LambdaProvider.capabilities.billing_granularity_s == 60
    assert row["cost"] == pytest.approx(3.6 * 2 / 60)  # per-second accrual said 0.061
