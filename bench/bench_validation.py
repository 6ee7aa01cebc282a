"""The planner against published runs: `python -m bench validation`.

Re-estimates every row of cloudgpu/planner/data/validation.csv (training GPU-hours and
throughput, peak memory, serving throughput, first-token latency, KV-cache capacity,
each with its source) from the inputs the source states, and reports per case and in
summary: median |error| and the share within 30%, against issue 14's targets. Three
summaries: all rows with default inputs; only the rows no factor was read from
(held out); and with each row's closing input (the MFU or framework a rule cannot see)
where the table gives one. Excluded rows (a published figure that contradicts itself)
are listed with the reason and left out of the summaries.
"""

from __future__ import annotations

import json
from pathlib import Path

from cloudgpu.catalog import load_registry
from cloudgpu.planner.validation import GROUPS, TARGETS, Result, Summary, evaluate_all, summarize

TITLES = {
    "time": "Training and fine-tuning time",
    "memory": "Memory (peak per GPU, KV-cache capacity)",
    "inference": "Inference throughput and latency",
}


def _pct(x: float | None) -> str:
    if x is None:
        return "does not fit"
    return "inf" if x == float("inf") else f"{x:+.0%}"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}"


def _row(r: Result) -> str:
    c = r.case
    gpus = f"{c.gpus_per_node * c.num_nodes}x {c.gpu}"
    closed = f"{c.closing_text}: {_pct(r.closed_error)}" if c.closing else ""
    mark = " (derived)" if r.derived else ""
    return (
        f"| {c.id}{mark} | {c.task} | {gpus} | {c.metric} | {_num(c.published)} | "
        f"{_num(r.estimate)} | {_pct(r.error)} | {closed} | {r.layout} |"
    )


def _verdict(group: str, s: Summary) -> str:
    t = TARGETS[group]
    checks = [f"median <= {t['median']:.0%}: {'met' if s.median_abs <= t['median'] else 'MISSED'}"]
    if "within_30" in t:
        ok = s.within_30 >= t["within_30"]
        checks.append(f">= {t['within_30']:.0%} within 30%: {'met' if ok else 'MISSED'}")
    if "worst" in t:
        ok = s.worst_abs <= t["worst"]
        checks.append(f"every case within {t['worst']:.0%}: {'met' if ok else 'MISSED'}")
    return "; ".join(checks)


def _summary_rows(results: list[Result]) -> tuple[list[str], dict[str, object]]:
    lines = [
        "| group | rows | median abs error | within 30% | worst | targets (issue 14) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    data: dict[str, object] = {}
    for group in GROUPS:
        for label, kw in (
            ("all rows", {}),
            ("held out", {"held_out": True}),
            ("with closing inputs", {"closed": True}),
        ):
            s = summarize(results, group, **kw)
            if s is None:
                continue
            lines.append(
                f"| {group}, {label} | {s.cases} | {s.median_abs:.1%} | {s.within_30:.0%} | "
                f"{_pct(s.worst_abs)} | {_verdict(group, s)} |"
            )
            data[f"{group}/{label}"] = s.__dict__
    return lines, data


def report(results: list[Result]) -> tuple[str, dict[str, object]]:
    summary, data = _summary_rows(results)
    md = [
        "# Planner validation (bench/bench_validation.py)",
        "",
        "Every row of `cloudgpu/planner/data/validation.csv` re-estimated from the inputs its",
        "source states. Error: for GPU-hours and latency, estimate / published - 1; for",
        "throughputs, the error of the time they imply (published / estimate - 1), so +20%",
        "always means the planner expects the job to take 20% longer; memory: estimate /",
        "published - 1 (PyTorch-allocator figures compared without the CUDA context).",
        "'derived' rows are ones a framework factor was read from (data/frameworks.json);",
        "'held out' leaves them out. A closing input is the figure a rule that sees only",
        "model, GPU and tokens cannot know (the run's MFU, its framework).",
        "",
        "## Summary",
        "",
        *summary,
        "",
    ]
    cases = []
    for group in GROUPS:
        md += [
            f"## {TITLES[group]}",
            "",
            "| case | task | GPUs | metric | published | estimate | error | with closing input "
            "| layout the planner chose |",
            "|---|---|---|---|---:|---:|---:|---|---|",
        ]
        for r in results:
            if r.case.group == group and not r.case.excluded:
                md.append(_row(r))
            cases.append(
                {
                    "id": r.case.id,
                    "group": r.case.group,
                    "published": r.case.published,
                    "estimate": r.estimate,
                    "error": r.error,
                    "closed_error": r.closed_error,
                    "derived": r.derived,
                    "excluded": r.case.excluded,
                    "layout": r.layout,
                }
            )
        md.append("")
    md += ["## Excluded rows", ""]
    md += [f"- {r.case.id}: {r.case.status}" for r in results if r.case.excluded]
    md += ["", "Sources and notes per row: `cloudgpu/planner/data/validation.csv`.", ""]
    return "\n".join(md), {"summary": data, "cases": cases}


def run(results_dir: Path) -> str:
    results = evaluate_all(load_registry())
    md, data = report(results)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "validation.md").write_text(md)
    (results_dir / "validation.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    return "\n".join(md.splitlines()[:24])


if __name__ == "__main__":
    print(run(Path(__file__).resolve().parent / "results"))
