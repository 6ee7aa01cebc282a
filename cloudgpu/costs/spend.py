"""What was actually spent: the state store's spend records summed by job, provider,
GPU and day, in cents that add up.

Each record carries the price at launch and the billed seconds, so these sums stay right
after a catalog refresh changes or drops a price. Group totals are rounded to cents by
largest remainder so the per-job (per-provider, per-GPU) cents add up exactly to the
grand total a reader sees. Records are passed in; this module does not open the store.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cloudgpu.errors import ConfigError
from cloudgpu.spec.fields import shown
from cloudgpu.spec.units import parse_duration_s
from cloudgpu.state.store import SpendRecord

MAX_WINDOW_DAYS = 36_500  # a hundred years: anything longer is a typo


def parse_since(text: str, now: float, origin: str = "--since") -> float:
    """A window back from now in the one duration grammar (``90d``, ``12h``, ``2w``,
    ``10m`` = ten minutes, ``1h30m``), or an ISO date; the window's start (unix seconds)."""
    try:
        seconds = parse_duration_s(text)
    except ValueError:
        return _since_date(text, now, origin)
    if seconds > MAX_WINDOW_DAYS * 86400:
        raise ConfigError(
            f"{origin}: expected a window of at most {MAX_WINDOW_DAYS}d, got {shown(text)}"
        )
    return now - seconds


def _since_date(text: str, now: float, origin: str) -> float:
    try:
        if len(text) > 40:
            raise ValueError("too long for a date")
        dt = datetime.fromisoformat(text.strip())
        ts = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError, OSError):
        raise ConfigError(
            f"{origin}: expected a window like 90d, 12h, 2w, 10m (minutes) or a date like "
            f"2026-09-01, got {shown(text)}"
        ) from None
    if ts >= now:
        raise ConfigError(f"{origin}: {shown(text)} is not in the past")
    return ts


def gpu_hours(rec: SpendRecord) -> float:
    return rec.billed_seconds / 3600.0 * rec.gpu_count


def cents_that_add_up(amounts: dict[str, float]) -> dict[str, int]:
    """Round each amount to cents so the cents sum to the rounded total (largest remainder)."""
    total = round(math.fsum(amounts.values()) * 100)
    floors = {k: math.floor(v * 100) for k, v in amounts.items()}
    short = total - sum(floors.values())
    by_remainder = sorted(amounts, key=lambda k: amounts[k] * 100 - floors[k], reverse=True)
    for k in by_remainder[: max(0, short)]:
        floors[k] += 1
    return floors


@dataclass(frozen=True)
class SpendGroup:
    key: str
    cents: int
    gpu_hours: float
    instances: int

    @property
    def cost(self) -> float:
        return self.cents / 100.0


@dataclass(frozen=True)
class SpendSummary:
    since: float | None
    until: float
    total_cents: int
    gpu_hours: float
    by_job: list[SpendGroup]
    by_provider: list[SpendGroup]
    by_gpu: list[SpendGroup]
    by_day: dict[str, dict[str, float]]  # day -> provider/GPU label -> USD
    records: list[SpendRecord]

    @property
    def total(self) -> float:
        return self.total_cents / 100.0


def _groups(records: Sequence[SpendRecord], key: Callable[[SpendRecord], str]) -> list[SpendGroup]:
    amounts: dict[str, float] = defaultdict(float)
    hours: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in records:
        k = key(r)
        amounts[k] += r.cost
        hours[k] += gpu_hours(r)
        count[k] += 1
    cents = cents_that_add_up(dict(amounts))
    groups = [SpendGroup(k, cents[k], hours[k], count[k]) for k in amounts]
    return sorted(groups, key=lambda g: (-g.cents, g.key))


def series_label(rec: SpendRecord) -> str:
    return f"{rec.provider} {rec.gpu or '(no GPU)'}"


def by_day(records: Iterable[SpendRecord]) -> dict[str, dict[str, float]]:
    """Cost per UTC day and provider/GPU, a record split over the days it ran."""
    days: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in records:
        start, end = r.started_at, max(r.ended_at, r.started_at)
        span = end - start
        t = start
        while True:
            day = datetime.fromtimestamp(t, UTC).date()
            next_midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(1)
            stop = min(end, next_midnight.timestamp())
            share = (stop - t) / span if span > 0 else 1.0
            days[day.isoformat()][series_label(r)] += r.cost * share
            if stop >= end:
                break
            t = stop
    return {d: dict(v) for d, v in sorted(days.items())}


def summarize(
    records: Sequence[SpendRecord], since: float | None, now: float | None = None
) -> SpendSummary:
    """Spend grouped every way the report shows it; empty input is a ConfigError."""
    if not records:
        window = "" if since is None else " since " + _day(since)
        raise ConfigError(
            f"no spend recorded{window}",
            hint="spend is recorded when `cloudgpu launch` tears an instance down",
        )
    amounts = {r.instance_id: r.cost for r in records}
    return SpendSummary(
        since=since,
        until=time.time() if now is None else now,
        total_cents=sum(cents_that_add_up(amounts).values()),
        gpu_hours=math.fsum(gpu_hours(r) for r in records),
        by_job=_groups(records, lambda r: r.job_id),
        by_provider=_groups(records, lambda r: r.provider),
        by_gpu=_groups(records, lambda r: r.gpu or "(no GPU)"),
        by_day=by_day(records),
        records=list(records),
    )


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).date().isoformat()
