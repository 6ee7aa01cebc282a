"""Fit and time one machine shape (GPU model x GPUs per node x nodes): pick the fastest
layout that fits (sharding, recomputation), or say why none does and the cheapest change
that would make it fit.

Works on one shape at a time and caches nothing itself (rank.py caches per shape); it
must not look at prices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from cloudgpu.catalog.gpus import GpuSpec
from cloudgpu.planner.memory import GIB, Layout, memory_breakdown
from cloudgpu.planner.timing import infer_time, train_time
from cloudgpu.planner.workload import Workload

SHARDINGS = ("ddp", "zero1", "zero2", "zero3")
AUTO_BATCHES = (256, 128, 64, 32, 16, 8, 4, 2, 1)


@dataclass(frozen=True)
class Shape:
    """What the fit depends on: the GPU, how many, and how they are connected."""

    gpu_memory_gb: float
    gpus_per_node: int
    num_nodes: int = 1
    network_gbps: float = 0.0

    @property
    def n_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes


@dataclass(frozen=True)
class ShapeEstimate:
    fits: bool
    layout: Layout | None
    breakdown: dict[str, float] = field(default_factory=dict)  # GiB per GPU
    memory_gb: float = 0.0  # per GPU
    hours: float | None = None  # compute wall-clock hours, scaling included
    scaling: float | None = None
    reason: str = ""
    fix: str = ""


def layouts(w: Workload, shape: Shape) -> list[Layout]:
    """Every layout the job allows on ``shape``, most preferred (least overhead) first."""
    if not w.training:
        # Serving engines fill free memory with KV cache: try the most sequences first.
        batches = (w.batch,) if w.batch else AUTO_BATCHES
        return [
            Layout(shape.gpus_per_node, shape.num_nodes, shape.gpus_per_node, "none", batch=b)
            for b in batches
        ]
    n = shape.n_gpus
    shardings = SHARDINGS if w.sharding == "auto" else (w.sharding,)
    if n == 1:
        shardings = ("ddp",)
    if w.checkpointing != "auto":
        ckpts: tuple[str, ...] = (w.checkpointing,)
    elif w.attention == "eager":
        ckpts = ("none", "selective", "full")
    else:
        ckpts = ("none", "full")  # with flash attention selective keeps what none keeps
    return [
        Layout(shape.gpus_per_node, shape.num_nodes, w.tensor_parallel, s, c, w.optimizer)
        for c in ckpts
        for s in shardings
    ]


def _hours(w: Workload, lay: Layout, spec: GpuSpec | None, shape: Shape) -> tuple[float, float]:
    if spec is None or not spec.bf16_tflops or not (w.training or spec.memory_bw_tbs):
        return float("nan"), float("nan")  # no published performance: time unknown
    if w.training:
        t = train_time(w, lay, spec, shape.network_gbps)
        return t.compute_hours, t.scaling_efficiency
    it = infer_time(w, lay, spec)
    return it.hours / shape.num_nodes, 1.0  # extra nodes serve as independent replicas


def _check_shape(w: Workload, shape: Shape) -> str:
    tp = w.tensor_parallel if w.training else 1
    if shape.gpus_per_node % tp:
        return f"tensor_parallel {tp} does not divide {shape.gpus_per_node} GPUs per node"
    return ""


def estimate_shape(w: Workload, shape: Shape, spec: GpuSpec | None) -> ShapeEstimate:
    """The fastest fitting layout of ``w`` on ``shape`` (or why nothing fits), no fix."""
    bad = _check_shape(w, shape)
    if bad:
        return ShapeEstimate(False, None, reason=bad)
    best: tuple[float, Layout, dict[str, float], float] | None = None
    smallest: tuple[float, Layout, dict[str, float]] | None = None
    for lay in layouts(w, shape):
        parts = memory_breakdown(w, lay)
        need = sum(parts.values()) / GIB
        if smallest is None or need < smallest[0]:
            smallest = (need, lay, parts)
        if need > shape.gpu_memory_gb:
            continue
        hours, eff = _hours(w, lay, spec, shape)
        key = 0.0 if math.isnan(hours) else hours  # unknown speed: keep preference order
        if best is None or key < best[0]:
            best = (key, lay, parts, eff)
            if math.isnan(hours):
                break
    if best is not None:
        key, lay, parts, eff = best
        known = not math.isnan(eff)
        return ShapeEstimate(
            True,
            lay,
            _gib(parts),
            sum(parts.values()) / GIB,
            hours=key if known else None,
            scaling=eff if known else None,
        )
    assert smallest is not None
    need, lay, parts = smallest
    how = f" even with {lay.describe()}" if lay.describe() else ""
    return ShapeEstimate(
        False,
        lay,
        _gib(parts),
        need,
        reason=f"needs {need:.1f} GB per GPU > {shape.gpu_memory_gb:g} GB{how}",
    )


def _gib(parts: dict[str, float]) -> dict[str, float]:
    return {k: round(v / GIB, 3) for k, v in parts.items()}


def _changes(w: Workload, shape: Shape) -> list[tuple[str, Workload, Shape]]:
    """Single changes to try, cheapest first: settings, then more GPUs, then nodes."""
    out: list[tuple[str, Workload, Shape]] = []
    if w.training and w.checkpointing not in ("auto", "full"):
        out.append(("checkpointing: full", replace(w, checkpointing="full"), shape))
    if w.training and w.sharding not in ("auto", "zero3") and shape.n_gpus > 1:
        out.append(("sharding: zero3", replace(w, sharding="zero3"), shape))
    if w.kind in ("train", "finetune") and w.optimizer in ("adam", "adamw"):
        out.append(("optimizer: adam8bit", replace(w, optimizer="adam8bit"), shape))
    if w.training and w.micro_batch > 1:
        out.append(("micro_batch: 1", replace(w, micro_batch=1), shape))
    if w.kind == "finetune":
        out.append(("kind: lora", replace(w, kind="lora"), shape))
    if w.kind in ("finetune", "lora"):
        out.append(("kind: qlora", replace(w, kind="qlora", lora_rank=64), shape))
    if not w.training and w.batch > 1:
        out.append(("batch: 1", replace(w, batch=1), shape))
    for k in (2, 4, 8):
        if k > shape.gpus_per_node:
            out.append((f"{k} GPUs per node", w, replace(shape, gpus_per_node=k)))
    if w.training:
        for m in (2, 4, 8, 16, 32, 64, 128):
            if m > shape.num_nodes:
                out.append((f"num_nodes: {m}", w, replace(shape, num_nodes=m)))
    return out


def suggest_fix(w: Workload, shape: Shape, spec: GpuSpec | None) -> str:
    """The first single change (cheapest first) under which ``w`` fits, or a bigger GPU."""
    for label, w2, shape2 in _changes(w, shape):
        est = estimate_shape(w2, shape2, spec)
        if est.fits:
            how = est.layout.describe() if est.layout else ""
            extra = f", {how}" if how else ""
            return f"{label} ({est.memory_gb:.1f} GB/GPU{extra})"
    here = estimate_shape(w, shape, spec)
    if here.layout is not None:
        how = here.layout.describe()
        return f"a GPU with >= {math.ceil(here.memory_gb)} GB" + (f" ({how})" if how else "")
    return "no single change fits it"


def min_gpus(
    w: Workload, memory_gb: float, spec: GpuSpec | None, max_gpus: int = 1024
) -> ShapeEstimate | None:
    """The smallest shape (8 GPUs per node beyond one node) of this GPU that fits ``w``."""
    counts = [(k, 1) for k in (1, 2, 4, 8)]
    nodes = 2
    while 8 * nodes <= max_gpus and w.training:
        counts.append((8, nodes))
        nodes *= 2
    for per_node, n_nodes in counts:
        est = estimate_shape(w, Shape(memory_gb, per_node, n_nodes), spec)
        if est.fits:
            return est
    return None
