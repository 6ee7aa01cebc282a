"""The planner against published runs: every row of data/validation.csv (a training
run's GPU-hours or throughput, a measured peak memory, a serving engine's throughput,
first-token latency or KV-cache capacity, each with its source) re-estimated from the
inputs the source states, and the error reported.

Errors are in the planner's own terms: for time-like figures (GPU-hours, latency) the
relative error of the estimate; for throughputs the relative error of the time they
imply (published / estimated - 1), so a +20% always means "the planner thinks it takes
20% longer than it did". Memory: estimate / published - 1, after taking out what the
measurement does not see (``torch.cuda.max_memory_allocated`` misses the CUDA context
and NCCL buffers). A row the planner cannot fit at all is reported as such, not skipped.

Rows whose figure a framework factor was read from (data/frameworks.json
``derived_from``) are marked ``derived``: they test the arithmetic, not the model's
reach; summaries are given over all rows and over the held-out ones. Rows with a
``closing`` input (e.g. ``mfu=0.59``) are ones no rule that sees only the model, GPU and
token count can match; the estimate with that input is reported beside the default.

This module reads only its bundled data; the bench report and tests call it.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from cloudgpu.catalog.gpus import GpuRegistry, GpuSpec, usable_gib
from cloudgpu.errors import ConfigError
from cloudgpu.planner.fit import Shape, estimate_shape
from cloudgpu.planner.frameworks import raw_table
from cloudgpu.planner.memory import GIB, Layout, kv_cache_bytes_per_token, kv_capacity_tokens
from cloudgpu.planner.timing import decode_step_s, infer_time, prefill_s
from cloudgpu.planner.workload import ARCH_KEYS, Workload, parse_count, parse_workload

GROUPS = ("time", "memory", "inference")
TIME_METRICS = ("gpu_hours", "tokens_per_s_per_gpu", "tokens_per_s")
MEMORY_METRICS = ("memory_gib", "memory_gb", "kv_cache_gib", "kv_tokens")
SERVE_METRICS = ("out_tokens_per_s_per_gpu", "first_token_ms", "decode_tokens_per_s")
TARGETS = {  # issue 14: median |error| and share within 30% (time), worst case (memory)
    "time": {"median": 0.15, "within_30": 0.80},
    "memory": {"median": 0.08, "worst": 0.15},
    "inference": {"median": 0.20},
}


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    task: str
    metric: str
    published: float
    gpu: str
    gpus_per_node: int
    num_nodes: int
    network_gbps: float
    gpu_memory_gib: float
    workload: dict[str, Any]
    measured: str  # allocated | reserved | capacity (memory rows)
    source: str
    note: str
    closing: dict[str, Any]
    status: str = ""  # "" or "excluded: why" (the figure contradicts itself)

    @property
    def excluded(self) -> bool:
        return self.status.startswith("excluded")

    @property
    def closing_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.closing.items())


@dataclass(frozen=True)
class Result:
    case: Case
    estimate: float | None  # in the published metric's unit; None: does not fit
    error: float | None  # planner-terms relative error (module docstring)
    layout: str
    derived: bool
    closed_estimate: float | None = None
    closed_error: float | None = None


def _pairs(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        key, _, value = item.partition("=")
        out[key.strip()] = _scalar(value.strip())
    return out


def _scalar(value: str) -> Any:
    if value in ("true", "false"):
        return value == "true"
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value else number


@lru_cache(maxsize=1)
def load_cases() -> tuple[Case, ...]:
    text = resources.files("cloudgpu.planner.data").joinpath("validation.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return tuple(_case(row) for row in rows)


def _case(row: dict[str, str]) -> Case:
    return Case(
        id=row["id"],
        group=row["group"],
        task=row["task"],
        metric=row["metric"],
        published=float(row["published"]),
        gpu=row["gpu"],
        gpus_per_node=int(row["gpus_per_node"]),
        num_nodes=int(row["num_nodes"] or 1),
        network_gbps=float(row["network_gbps"] or 0),
        gpu_memory_gib=float(row["gpu_memory_gib"] or 0),
        workload=_pairs(row["workload"]),
        measured=row["measured"],
        source=row["source"],
        note=row["note"],
        closing=_pairs(row["closing"]),
        status=row.get("status") or "",
    )


def derived_ids() -> frozenset[str]:
    """Rows a factor or shared rule was read from (data/frameworks.json)."""
    table = raw_table()
    ids = {i for row in table["frameworks"].values() for i in row.get("derived_from", ())}
    ids.update(i for rows in table.get("rules_derived_from", {}).values() for i in rows)
    return frozenset(ids)


def _workload(raw: dict[str, Any]) -> dict[str, Any]:
    """The row's keys as a workload block: a named shape goes into an arch: mapping."""
    out = dict(raw)
    name = out.pop("arch_name", None)
    if name is not None:
        arch = {k: out.pop(k) for k in ARCH_KEYS if k in out}
        out["arch"] = {"name": name, **arch}
    return out


def _estimate(case: Case, raw: dict[str, Any], registry: GpuRegistry) -> tuple[float | None, str]:
    spec = registry.require(case.gpu)
    w = parse_workload(_workload(raw))
    memory = case.gpu_memory_gib or usable_gib(0.0, spec)
    shape = Shape(memory, case.gpus_per_node, case.num_nodes, case.network_gbps)
    if case.metric in ("kv_cache_gib", "kv_tokens"):
        return _kv(case, w, spec, memory), f"TP={w.tensor_parallel or 1}"
    if case.metric in ("first_token_ms", "decode_tokens_per_s"):
        return _latency(case, w, spec), f"TP={w.tensor_parallel or 1}"
    est = estimate_shape(w, shape, spec)
    layout = est.layout.describe() if est.layout else ""
    if not est.fits:
        if case.metric.startswith("memory") and est.layout is not None:
            return _memory(case, est.memory_gib, est.breakdown), layout + " (does not fit)"
        return None, est.reason
    if case.metric.startswith("memory"):
        return _memory(case, est.memory_gib, est.breakdown), layout
    assert est.hours is not None and est.layout is not None
    return _throughput(case, w, est.hours, est.layout, spec), layout


def _memory(case: Case, gib: float, parts: dict[str, float]) -> float:
    if case.measured in ("allocated", "reserved"):
        gib -= parts.get("overhead", 0.0)  # outside PyTorch's allocator
    return gib * GIB / 1e9 if case.metric == "memory_gb" else gib


def _kv(case: Case, w: Workload, spec: GpuSpec, memory: float) -> float:
    tp = w.tensor_parallel or 1
    lay = Layout(tp, 1, tp, "none", batch=w.batch or 1)
    tokens = kv_capacity_tokens(w, lay, memory)
    if case.metric == "kv_tokens":
        return tokens
    return tokens * kv_cache_bytes_per_token(w.arch) / tp / GIB


def _latency(case: Case, w: Workload, spec: GpuSpec) -> float:
    tp = w.tensor_parallel or 1
    if case.metric == "first_token_ms":
        return prefill_s(w, w.input_tokens, w.input_tokens / 2, spec, tp) * 1000.0
    lay = Layout(tp, 1, tp, "none", batch=1)
    return 1.0 / decode_step_s(w, lay, spec, w.input_tokens + w.output_tokens / 2)


def _throughput(case: Case, w: Workload, hours: float, lay: Layout, spec: GpuSpec) -> float:
    n = lay.n_gpus
    if case.metric == "gpu_hours":
        return hours * n
    if case.metric == "out_tokens_per_s_per_gpu":
        t = infer_time(w, lay, spec)
        return w.requests * w.output_tokens / (t.hours * 3600.0) / n
    per_s = w.tokens / (hours * 3600.0)
    return per_s / n if case.metric == "tokens_per_s_per_gpu" else per_s


def _error(metric: str, estimate: float, published: float) -> float:
    if metric in ("gpu_hours", "first_token_ms") or metric in MEMORY_METRICS:
        return estimate / published - 1.0
    return published / estimate - 1.0  # a throughput: the error of the time it implies


def evaluate(case: Case, registry: GpuRegistry) -> Result:
    raw = {"tokens": "1B", **case.workload} if case.group == "time" else dict(case.workload)
    if "tokens" in raw and not isinstance(raw["tokens"], str):
        raw["tokens"] = parse_count(raw["tokens"], "tokens")
    try:
        estimate, layout = _estimate(case, raw, registry)
    except ConfigError as exc:
        raise ConfigError(f"validation.csv {case.id}: {exc}") from exc
    error = None if estimate is None else _error(case.metric, estimate, case.published)
    closed = closed_error = None
    if case.closing:
        closed, _ = _estimate(case, {**raw, **case.closing}, registry)
        closed_error = None if closed is None else _error(case.metric, closed, case.published)
    return Result(case, estimate, error, layout, case.id in derived_ids(), closed, closed_error)


def evaluate_all(registry: GpuRegistry) -> list[Result]:
    return [evaluate(case, registry) for case in load_cases()]


@dataclass(frozen=True)
class Summary:
    group: str
    cases: int
    fitted: int  # cases the planner could estimate at all
    median_abs: float
    within_30: float  # share of all cases within 30% (a case that does not fit counts out)
    worst_abs: float


def summarize(
    results: list[Result], group: str, *, held_out: bool = False, closed: bool = False
) -> Summary | None:
    """Median |error|, share within 30% and worst case of ``group``: all rows, only those
    no factor was read from (``held_out``), or with each row's closing input applied
    where it has one (``closed``: what a user who states the framework and MFU gets)."""
    rows = [
        r
        for r in results
        if r.case.group == group and not r.case.excluded and not (held_out and r.derived)
    ]
    if not rows:
        return None
    picked = [r.closed_error if closed and r.case.closing else r.error for r in rows]
    errors = [abs(e) for e in picked if e is not None]
    inf = float("inf")
    return Summary(
        group=group,
        cases=len(rows),
        fitted=len(errors),
        median_abs=statistics.median(errors + [inf] * (len(rows) - len(errors))),
        within_30=sum(e <= 0.30 for e in errors) / len(rows),
        worst_abs=max(errors + [inf] * (len(rows) - len(errors))),
    )
