"""`cloudgpu plan JOB.yaml`: rank the machines that fit a job by what the whole job
costs, and the rendering (table or JSON) it shares with `cloudgpu estimate`
(cloudgpu/cli/estimate.py).

Thin: loads the job, plans it through the one gather + plan
path (cloudgpu.planner.choose, via cloudgpu.cli.sources) and renders the result as a
table or JSON. All gathering, sizing and ranking lives in the core.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from cloudgpu.catalog import Offer
from cloudgpu.cli.context import App, get_app
from cloudgpu.cli.params import Number
from cloudgpu.cli.sources import choose
from cloudgpu.data.probeview import summary as probe_summary
from cloudgpu.errors import ConfigError
from cloudgpu.planner import OBJECTIVES, Candidate, Plan, resolve_framework
from cloudgpu.planner.choose import nothing_fits
from cloudgpu.scaffold import job_file_for
from cloudgpu.state import probes
from cloudgpu.texttable import render_table, terminal_width

F = Callable[..., Any]


def offer_json(o: Offer) -> dict[str, Any]:
    """The offer fields every candidate listing starts with (plan, launch, runner)."""
    return {
        "provider": o.provider,
        "instance_type": o.instance_type,
        "region": o.region,
        "zone": o.zone,
        "market": o.market,
        "gpu": o.gpu,
        "gpu_count": o.gpu_count,
        "price_per_hour": round(o.price_per_hour, 4),
    }


def candidate_json(c: Candidate) -> dict[str, Any]:
    return {
        **offer_json(c.offer),
        "num_nodes": c.num_nodes,
        "fits": c.fits,
        "memory_per_gpu_gib": c.memory_per_gpu_gib,
        "memory_breakdown_gib": c.memory_breakdown,
        "layout": c.layout,
        "est_hours": _round(c.est_hours),
        "est_gpu_hours": _round(c.est_gpu_hours),
        "est_cost": _round(c.est_cost),
        "price_per_hour": round(c.price_per_hour, 4),
        "scaling_efficiency": _round(c.scaling_efficiency),
        "stall_fraction": c.stall_fraction,
        "staging_hours": _round(c.staging_hours),
        "startup_hours": _round(c.startup_hours),
        "spot_penalty_hours": _round(c.spot_penalty_hours),
        "tokens_per_s": _round(c.tokens_per_s),
        "calibration": c.calibration,
        "reason": c.reason,
        "fix": c.fix,
        "note": c.note,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")  # six significant digits


def _gpu_config(c: Candidate) -> str:
    o = c.offer
    one = f"{o.gpu_count}x {o.gpu}" if o.gpu_count else "CPU only"
    return f"{c.num_nodes} x ({one})" if c.num_nodes > 1 else one


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render_candidates(cands: list[Candidate]) -> list[str]:
    headers = [
        "#",
        "provider",
        "instance",
        "region",
        "market",
        "GPUs",
        "fits",
        "mem/GPU GiB",
        "layout",
        "est hours",
        "est total $",
        "$/h",
    ]
    rows = [
        [
            str(i),
            c.offer.provider,
            c.offer.instance_type,
            f"{c.offer.region}/{c.offer.zone}" if c.offer.zone else c.offer.region,
            c.offer.market,
            _gpu_config(c),
            "yes" if c.fits else "no",
            _num(c.memory_per_gpu_gib, ".1f"),
            c.layout or "-",
            _num(c.est_hours, ",.1f"),
            _num(c.est_cost, ",.2f"),
            f"{c.price_per_hour:,.2f}",
        ]
        for i, c in enumerate(cands, 1)
    ]
    return render_table(headers, rows, right={0, 7, 9, 10, 11}, width=terminal_width(), rule=True)


def _workload_reject(c: Candidate) -> bool:
    """Met the resources but not the workload (memory) or the budget."""
    return c.memory_per_gpu_gib is not None or c.est_cost is not None


def _miss(c: Candidate) -> tuple[float, float]:
    if c.est_cost is not None:
        return (0.0, c.est_cost)
    have = c.offer.gpu_memory_gb or 1.0
    return ((c.memory_per_gpu_gib or 0.0) / have, c.price_per_hour)


def render_rejected(p: Plan, limit: int) -> list[str]:
    """Offers that met the resources but not the workload, then resource misses grouped."""
    # Near misses first: over budget (they fit), then the smallest memory shortfall.
    by_workload = sorted((c for c in p.rejected if _workload_reject(c)), key=_miss)
    lines: list[str] = []
    seen: set[tuple[str, int, int]] = set()
    shown = 0
    for c in by_workload:
        key = (c.offer.gpu, c.offer.gpu_count, c.num_nodes)
        if key in seen or shown >= limit:
            continue
        seen.add(key)
        shown += 1
        fix = f"; fix: {c.fix}" if c.fix else ""
        lines.append(f"  {_gpu_config(c)} ({c.offer.instance_type}): {c.reason}{fix}")
    resource = [c.reason.split(" (")[0] for c in p.rejected if not _workload_reject(c)]
    for reason, n in Counter(resource).most_common(5):
        lines.append(f"  {n} offer(s): {reason}")
    if lines:
        lines.insert(0, f"Not fitting ({len(p.rejected)} offers):")
    return lines


def _best_notes(best: Candidate) -> list[str]:
    """How the #1 estimate is made up, so its total can be checked by hand."""
    out = []
    if best.memory_breakdown:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in best.memory_breakdown.items())
        out.append(f"#1 memory per GPU (GiB): {parts}")
    if best.est_hours is not None:
        compute = best.est_hours - best.staging_hours - best.startup_hours
        compute -= best.spot_penalty_hours
        speed = f", {best.tokens_per_s:,.0f} tokens/s" if best.tokens_per_s else ""
        eff = best.scaling_efficiency if best.gpu_count > 1 else None
        scaling = f", scaling efficiency {eff:.0%}" if eff is not None else ""
        stall = f", data stalls {best.stall_fraction:.0%}" if best.stall_fraction else ""
        out.append(
            f"#1 hours: compute {compute:,.2f}{speed}{scaling}{stall}; staging "
            f"{best.staging_hours:.2f}; startup {best.startup_hours:.2f}; spot allowance "
            f"{best.spot_penalty_hours:.2f}"
        )
    if best.calibration:
        out.append(f"#1 speed {best.calibration}")
    if best.note:
        out.append(f"#1 {best.note}")
    return out


def render_plan(p: Plan, limit: int) -> str:
    out = [p.summary]
    w = p.workload
    if w is not None:
        arch = w.arch
        note = " (shape inferred from params)" if arch.inferred else ""
        fw = resolve_framework(w.framework, w.kind).name
        how = f"framework {fw}" + (" (default for the kind)" if w.framework == "auto" else "")
        out.append(
            f"workload: {w.kind} {arch.name}, {arch.total_params / 1e9:.2f}B params{note}; {how}"
        )
    if p.candidates:
        out += render_candidates(p.candidates[:limit])
        out += _best_notes(p.candidates[0])
    out += render_rejected(p, limit)
    if p.needs:
        out.append(p.needs)
    out += render_free(p)
    return "\n".join(out)


def render_free(p: Plan) -> list[str]:
    """Free tiers the job would fit if it named them (never chosen without that)."""
    lines = []
    for c in p.free[:3]:
        hours = f"~{c.est_hours:,.1f} h, " if c.est_hours is not None else ""
        note = c.note.removeprefix("free tier: ") or "fits"
        lines.append(
            f"  {c.offer.provider} {c.offer.instance_type} ({_gpu_config(c)}): $0, {hours}{note}"
        )
    if lines:
        names = sorted({c.offer.provider for c in p.free})
        lines.insert(
            0,
            f"Also fits a free tier (add {' or '.join(names)} to resources.providers; "
            "`cloudgpu check` says which can run jobs):",
        )
    return lines


def emit(
    p: Plan,
    as_json: bool,
    limit: int,
    all_rows: bool,
    hint: str | None = None,
    measured: dict[str, str] | None = None,
) -> None:
    """The plan as a table or JSON; ``measured``: probe figures by offer key."""
    measured = measured or {}
    if not p.candidates:
        why = p.needs or "no offer meets the job's resources"
        if as_json:  # the answer for scripts: fits false, why, and the nearest misses
            near = sorted((c for c in p.rejected if _workload_reject(c)), key=_miss)[:limit]
            misses = [candidate_json(c) for c in near] or [{"fits": False, "reason": why}]
            misses[0]["needs"] = why
            click.echo(json.dumps(misses, indent=2))
        else:
            for line in render_rejected(p, limit):
                click.echo(line, err=True)
        raise ConfigError(f"nothing fits: {why}", hint=hint or "see the reasons above")
    if as_json:
        rows = p.candidates[:limit]
        rows += [c for c in p.rejected if all_rows or _workload_reject(c)][:limit]
        docs = [candidate_json(c) for c in rows]
        for doc, c in zip(docs, rows, strict=True):
            if c.offer.key in measured:
                doc["measured"] = measured[c.offer.key]
        click.echo(json.dumps(docs, indent=2))
    else:
        click.echo(render_plan(p, limit))
        shown = [c for c in p.candidates[:limit] if c.offer.key in measured]
        if shown:
            click.echo("Measured on your own instances (`cloudgpu data probe`):")
        for c in shown:
            click.echo(f"  {c.offer.provider} {c.offer.instance_type}: {measured[c.offer.key]}")


def plan_options(func: F) -> F:
    """--objective, --json, --limit and --all: the options `plan` and `estimate` share."""
    func = click.option(
        "--all",
        "all_rows",
        is_flag=True,
        help="With --json, include offers rejected by resources too.",
    )(func)
    func = click.option(
        "--limit",
        type=Number(1, 1_000_000, integer=True),
        default=10,
        show_default=True,
        help="Candidates (and rejected examples) to show.",
    )(func)
    func = click.option("--json", "as_json", is_flag=True, help="JSON list, best first.")(func)
    func = click.option(
        "--objective",
        type=click.Choice(OBJECTIVES),
        default="cheapest",
        show_default=True,
        help="Rank by total cost, speed, or $/hour.",
    )(func)
    return func


ALL_PROVIDERS_HELP = (
    "Every provider the catalog knows, enabled or not (a what-if); default: the enabled "
    "ones, exactly what `launch` would try."
)


@click.command("plan")
@click.argument("job_file", type=click.Path(dir_okay=False))
@plan_options
@click.option("--all-providers", is_flag=True, help=ALL_PROVIDERS_HELP)
def plan_cmd(
    job_file: str, objective: str, as_json: bool, limit: int, all_rows: bool, all_providers: bool
) -> None:
    """Rank the machines that fit JOB_FILE by estimated total cost.

    JOB_FILE may also name a starter template (quickstart, finetune, batch-inference).
    Without a `workload:` block, the offers that meet `resources:` are ranked by $/hour;
    with one, each machine is sized (memory per GPU, layout), timed and costed:

    \b
      workload:
        kind: finetune      # train | finetune | lora | qlora | inference
        model: llama-3-8b   # or params: 8B, or layers/hidden/heads/vocab keys
        tokens: 2B          # training kinds; inference: requests: (or tokens:)
        seq_len: 4096       # also micro_batch, checkpointing, optimizer, sharding,
                            # precision, tensor_parallel, lora_rank, mfu, batch, ...

    Estimated hours include startup (your past launches when known), data staging,
    data stalls and, on spot, an interruption allowance. The candidates are those of the
    enabled providers, in the order `launch` tries them (--all-providers: every provider).
    """
    app = get_app()
    job = app.load_job(job_file_for(job_file, Path.cwd())[0])
    choice = choose(app, job, objective=objective, all_providers=all_providers)
    hint = nothing_fits(choice).hint if not choice.candidates else None
    measured = measured_on(app, choice.plan.candidates[:limit])
    emit(choice.plan, as_json, limit, all_rows, hint, measured)
    if not as_json:
        for note in choice.gathered.left_out:
            click.echo(f"note: {note}", err=True)


def measured_on(app: App, candidates: list[Candidate]) -> dict[str, str]:
    """Offer key -> the newest probe of its (provider, instance type), in words."""
    if not app.paths.state_db.exists():
        return {}
    store = app.store()
    try:
        latest = probes.latest_by_type(store)
    finally:
        store.close()
    out = {}
    for c in candidates:
        rec = latest.get((c.offer.provider, c.offer.instance_type))
        if rec is not None:
            day = time.strftime("%Y-%m-%d", time.localtime(rec.measured_at))
            out[c.offer.key] = f"{probe_summary(rec.result)} ({day})"
    return out


plan = plan_cmd  # COMMANDS names the attribute `plan`
