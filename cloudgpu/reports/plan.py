"""The plan report: the machines that fit a job, ranked by what the whole job costs,
with a cost chart, a time-versus-cost scatter and the closest rejected offers.

Builds a Report from a planner Plan passed in; runs no planning itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cloudgpu.errors import ConfigError
from cloudgpu.reports.model import Chart, Column, Report, Table
from cloudgpu.reports.offers import source_and_date

if TYPE_CHECKING:  # types only: reports and planner are peers, neither runs the other
    from cloudgpu.planner import Candidate, Plan

MAX_CANDIDATES = 25
MAX_REJECTED = 20


# The machine a candidate is, in both tables: its provider, shape, place and price.
_MACHINE_COLS = [
    Column("provider", "Provider"),
    Column("instance_type", "Instance"),
    Column("region", "Region/zone"),
    Column("market", "Market"),
    Column("gpu", "GPU"),
    Column("gpus", "GPUs", "int"),
    Column("price_per_hour", "$/h", "usd"),
]


def _machine(c: Candidate) -> dict[str, Any]:
    o = c.offer
    return {
        "provider": o.provider,
        "instance_type": o.instance_type,
        "region": f"{o.region}/{o.zone}" if o.zone else o.region,
        "market": o.market,
        "gpu": o.gpu,
        "gpus": c.gpu_count,
        "price_per_hour": c.price_per_hour,
    }


def _row(rank: int, c: Candidate) -> dict[str, Any]:
    return {
        "rank": rank,
        "label": f"#{rank} {c.offer.provider} {c.offer.instance_type}",
        **_machine(c),
        "est_hours": c.est_hours,
        "est_gpu_hours": c.est_gpu_hours,
        "est_cost": c.est_cost,
        "memory_per_gpu_gib": c.memory_per_gpu_gib,
        "layout": c.layout,
    }


def candidates_table(p: Plan) -> Table:
    rows = [_row(i, c) for i, c in enumerate(p.candidates[:MAX_CANDIDATES], start=1)]
    cols = [  # "label" stays in the rows for the charts; #, provider and instance say it
        Column("rank", "#", "int"),
        *_MACHINE_COLS,
        Column("est_hours", "Est. hours", "num"),
        Column("est_gpu_hours", "GPU-hours", "num"),
        Column("est_cost", "Est. job cost", "cents"),
        Column("memory_per_gpu_gib", "Memory/GPU (GiB)", "num"),
        Column("layout", "Layout"),
    ]
    note = f"Best {len(rows)} of {len(p.candidates)} fitting offers, ranked by {p.objective}."
    return Table("candidates", "Machines that fit, ranked", cols, rows, note=note)


def rejected_table(p: Plan) -> Table:
    near = [c for c in p.rejected if c.memory_per_gpu_gib is not None] or p.rejected
    rows = [{**_machine(c), "reason": c.reason, "fix": c.fix} for c in near[:MAX_REJECTED]]
    cols = [
        *_MACHINE_COLS,
        Column("reason", "Why not"),
        Column("fix", "Would fit with"),
    ]
    return Table(
        "rejected",
        "Closest offers that do not fit",
        cols,
        rows,
        note=f"{len(p.rejected)} offers rejected in all.",
    )


def plan_report(p: Plan, job_name: str, generated_at: str) -> Report:
    if not p.candidates:
        raise ConfigError(
            f"nothing fits: {p.needs or 'no offer meets the job resources'}",
            hint="run `cloudgpu plan` for the reasons",
        )
    source, date = source_and_date(c.offer for c in p.candidates)
    table = candidates_table(p)
    costed = p.workload is not None
    best = table.rows[0]
    lead = f"Best: {best['provider']} {best['instance_type']} ({best['market']}), " + (
        f"~${best['est_cost']:,.2f} for the job in ~{best['est_hours']:.1f} h."
        if costed and best["est_cost"] is not None
        else f"${best['price_per_hour']:.2f}/h (no workload block to size the job)."
    )
    value = "est_cost" if costed else "price_per_hour"
    charts = [
        Chart(
            "candidates",
            "Estimated job cost by candidate" if costed else "$/hour by candidate",
            "bars",
            "candidates",
            x="label",
            series=[value],
            x_title="Estimated job cost (USD)" if costed else "Price (USD per hour)",
            y_title="Candidate (rank, provider, instance)",
        )
    ]
    if costed:
        charts.append(
            Chart(
                "tradeoff",
                "Time vs cost",
                "scatter",
                "candidates",
                x="est_hours",
                y="est_cost",
                group="market",
                label="label",
                x_title="Estimated time (hours)",
                y_title="Estimated job cost (USD)",
                caption="Down and to the left is cheaper and sooner.",
            )
        )
    return Report(
        title=f"Plan for {job_name}",
        summary=[lead, p.summary],
        source=source,
        data_date=date,
        generated_at=generated_at,
        tables=[table, rejected_table(p)],
        charts=charts,
        kind="plan",
    )
