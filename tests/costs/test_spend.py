"""Spend totals from a real Store file: groups reconcile to the cent, days split."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.costs.defaults import TcoInputs
from cloudgpu.costs.history import history_rows, peak_concurrent_gpus
from cloudgpu.costs.spend import cents_that_add_up, parse_since, summarize
from cloudgpu.costs.tco import hardware_for, owned_cost
from cloudgpu.errors import ConfigError
from cloudgpu.state.store import Store
from tests.costs.helpers import spend

T0 = 1_764_547_200.0  # 2025-12-01T00:00:00Z


def fill(path: Path) -> Store:
    store = Store.open(path)
    recs = [
        spend("i-1", "job-a", hours=10, started_at=T0),
        spend(
            "i-2",
            "job-a",
            provider="runpod",
            price_per_hour=21.52,
            hours=5.5,
            started_at=T0 + 20 * 3600,
        ),  # crosses midnight
        spend(
            "i-3",
            "job-b",
            provider="runpod",
            gpu="A100-80GB",
            gpu_count=1,
            price_per_hour=1.39,
            hours=0.333,
            started_at=T0 + 86400,
        ),
        spend(
            "i-4",
            "job-c",
            provider="gcp",
            price_per_hour=87.84,
            hours=1 / 3,
            started_at=T0 + 2 * 86400,
        ),
    ]
    for r in recs:
        store.record_spend(r)
    return store


def test_totals_reconcile(tmp_path: Path) -> None:
    store = fill(tmp_path / "state.db")
    s = summarize(store.spend(), since=None, now=T0 + 10 * 86400)
    expected = 55.04 * 10 + 21.52 * 5.5 + 1.39 * 0.333 + 87.84 / 3
    assert s.total == pytest.approx(expected, abs=0.005)
    for groups in (s.by_job, s.by_provider, s.by_gpu):
        assert sum(g.cents for g in groups) == s.total_cents
    assert [g.key for g in s.by_job] == ["job-a", "job-c", "job-b"]
    assert s.gpu_hours == pytest.approx(80 + 44 + 0.333 + 8 / 3)
    day_total = sum(sum(v.values()) for v in s.by_day.values())
    assert day_total == pytest.approx(expected)
    # i-2 ran 4 h on Dec 1 and 1.5 h on Dec 2.
    assert s.by_day["2025-12-01"]["runpod H100-SXM"] == pytest.approx(21.52 * 4)
    assert s.by_day["2025-12-02"]["runpod H100-SXM"] == pytest.approx(21.52 * 1.5)


def test_since_filters(tmp_path: Path) -> None:
    store = fill(tmp_path / "state.db")
    since = parse_since("2025-12-02T12:00:00", now=T0 + 10 * 86400)
    s = summarize(store.spend(since=since), since=since)
    assert [g.key for g in s.by_job] == ["job-c"]
    with pytest.raises(ConfigError, match="no spend recorded since 2025-12-30"):
        summarize(store.spend(since=T0 + 29 * 86400), since=T0 + 29 * 86400)


def test_cents_largest_remainder() -> None:
    cents = cents_that_add_up({"a": 0.333, "b": 0.333, "c": 0.334})
    assert sum(cents.values()) == 100
    assert cents_that_add_up({}) == {}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90d", 90 * 86400), ("12h", 43200), ("2w", 14 * 86400), ("10m", 600), ("1h30m", 5400)],
)
def test_parse_since(text: str, seconds: float) -> None:
    """The one duration grammar: `10m` is ten minutes here too, as in idle_timeout: 10m."""
    assert parse_since(text, now=1e9) == 1e9 - seconds


@pytest.mark.parametrize(
    "text", ["0d", "yesterday", "2999-01-01", "-5d", "99999999d", "nan", "9999-99-99", "1" * 5000]
)
def test_parse_since_bad(text: str) -> None:
    with pytest.raises(ConfigError, match="--since"):
        parse_since(text, now=T0)


def test_history_owned_vs_rented(tmp_path: Path) -> None:
    store = fill(tmp_path / "state.db")
    inputs = TcoInputs()
    hw = hardware_for("H100-SXM", 8, 30000, 700, inputs)
    rows = history_rows(store.spend(), 90, {"H100-SXM": hw}, inputs)
    by_gpu = {r.gpu: r for r in rows}
    h100 = by_gpu["H100-SXM"]
    assert h100.gpu_hours == pytest.approx(80 + 44 + 8 / 3)
    assert h100.peak_gpus == 8 and h100.servers == 1
    u = h100.gpu_hours / (8 * 24 * 90)
    assert h100.utilization == pytest.approx(u)
    assert h100.owned_cost == pytest.approx(owned_cost(hw, inputs).total_yr(u) * 90 / 365)
    assert by_gpu["A100-80GB"].owned_cost is None and by_gpu["A100-80GB"].note
    with pytest.raises(ConfigError, match="no GPU spend"):
        history_rows([], 90, {}, inputs)


def test_peak_concurrency() -> None:
    a = spend("a", "j", gpu_count=8, started_at=0, hours=2)
    b = spend("b", "j", gpu_count=8, started_at=3600, hours=2)
    c = spend("c", "j", gpu_count=8, started_at=3 * 3600, hours=1)  # starts as b ends
    assert peak_concurrent_gpus([a, b, c]) == 16
