"""The spend report: what was spent per job, provider, GPU and day, from a SpendSummary.

Per-job, per-provider and per-GPU cents each add up to the grand total shown in the
summary (cloudgpu.costs.spend rounds them that way). Builds a Report; reads nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

from cloudgpu.costs.spend import SpendGroup, SpendSummary, gpu_hours
from cloudgpu.reports.model import Chart, Column, Report, Table, format_cell


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def _group_table(table_id: str, title: str, key_title: str, groups: list[SpendGroup]) -> Table:
    rows = [
        {"key": g.key, "instances": g.instances, "gpu_hours": g.gpu_hours, "cost": g.cost}
        for g in groups
    ]
    cols = [
        Column("key", key_title),
        Column("instances", "Instances", "int"),
        Column("gpu_hours", "GPU-hours", "num"),
        Column("cost", "Cost", "cents"),
    ]
    return Table(table_id, title, cols, rows, note="Rows add up to the total to the cent.")


def _day_table(s: SpendSummary) -> Table:
    rows = [
        {"day": day, "series": label, "cost": cost}
        for day, by_label in s.by_day.items()
        for label, cost in sorted(by_label.items())
    ]
    cols = [
        Column("day", "Day (UTC)"),
        Column("series", "Provider · GPU"),
        Column("cost", "Cost", "cents"),
    ]
    return Table(
        "by_day",
        "Spend over time by provider and GPU",
        cols,
        rows,
        note="An instance running past midnight is split over the days it ran.",
    )


def _records_table(s: SpendSummary) -> Table:
    rows = [
        {
            "instance_id": r.instance_id,
            "job_id": r.job_id,
            "provider": r.provider,
            "instance_type": r.instance_type,
            "market": r.market,
            "gpu": r.gpu,
            "gpu_count": r.gpu_count,
            "price_per_hour": r.price_per_hour,
            "started": _iso(r.started_at),
            "billed_hours": r.billed_seconds / 3600.0,
            "gpu_hours": gpu_hours(r),
            "cost": r.cost,
        }
        for r in s.records
    ]
    cols = [
        Column("instance_id", "Instance"),
        Column("job_id", "Job"),
        Column("provider", "Provider"),
        Column("instance_type", "Type"),
        Column("market", "Market"),
        Column("gpu", "GPU"),
        Column("gpu_count", "GPUs", "int"),
        Column("price_per_hour", "$/h at launch", "usd"),
        Column("started", "Started (UTC)"),
        Column("billed_hours", "Billed hours", "num"),
        Column("gpu_hours", "GPU-hours", "num"),
        Column("cost", "Cost", "cents"),
    ]
    return Table(
        "instances",
        "Every instance",
        cols,
        rows,
        note="Priced at the rate recorded at launch, so a later catalog refresh "
        "does not change past spend.",
    )


def spend_report(s: SpendSummary, generated_at: str) -> Report:
    first = min(r.started_at for r in s.records)
    last = max(r.ended_at for r in s.records)
    window = "all recorded history" if s.since is None else f"since {_iso(s.since)} UTC"
    # The headline shows each number exactly as the tables do (same cell formatting).
    summary = [
        f"Spent {format_cell(s.total, 'cents')} on {len(s.records)} instances "
        f"({format_cell(s.gpu_hours, 'num')} GPU-hours) across {len(s.by_job)} jobs, "
        f"{window}.",
    ]
    if s.by_provider:
        top = s.by_provider[0]
        share = format_cell(top.cents / max(s.total_cents, 1), "pct")
        summary.append(f"Largest: {top.key}, {format_cell(top.cost, 'cents')} ({share} of it).")
    totals = Table(
        "total",
        "Total",
        [
            Column("instances", "Instances", "int"),
            Column("gpu_hours", "GPU-hours", "num"),
            Column("cost", "Cost", "cents"),
        ],
        [{"instances": len(s.records), "gpu_hours": s.gpu_hours, "cost": s.total}],
    )
    tables = [
        totals,
        _group_table("by_job", "Spend by job", "Job", s.by_job),
        _group_table("by_provider", "Spend by provider", "Provider", s.by_provider),
        _group_table("by_gpu", "Spend by GPU", "GPU", s.by_gpu),
        _day_table(s),
        _records_table(s),
    ]
    charts = [
        Chart(
            "by_day",
            "Spend per day by provider and GPU",
            "stacked",
            "by_day",
            x="day",
            y="cost",
            group="series",
            x_title="Day (UTC)",
            y_title="Spend (USD)",
        )
    ]
    return Report(
        title="GPU spend",
        summary=summary,
        source="the instances cloudgpu ran, as it recorded them (rate at launch x billed time)",
        data_date=f"{_iso(first)} to {_iso(last)} UTC",
        generated_at=generated_at,
        tables=tables,
        charts=charts,
        kind="spend",
    )
