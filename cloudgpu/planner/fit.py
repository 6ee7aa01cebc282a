"""Fit and time one machine shape (GPU model x GPUs per node x nodes): search the layouts
the job allows for the fastest that fits, or say why none does and the cheapest change
that would make it fit.

The layout search (training): tensor parallelism inside a node (1, 2, 4, 8), pipeline
stages across nodes (divisors of the node count), data parallelism over the rest with
DDP or ZeRO-1/2/3 (FSDP), a micro-batch (1..32, no more than the global batch allows)
with gradient accumulation up to the global batch, and activation checkpointing only
where it pays: every combination that fits is timed and the fastest kept; ties keep the
less sharded, less recomputed one. Pruned without changing the answer: DDP, ZeRO-1 and
ZeRO-2 move the same bytes once per step, so only the least sharded one that fits is
timed (at its largest micro-batch unless pipelining makes the micro-batch count
matter); ZeRO-3 only when none of them fits; a checkpointing mode whose compute alone
is slower than the best found is skipped. Serving: tensor parallelism over a node's
GPUs, the rest as replicas, each holding the most concurrent sequences that fit (up to
256). Anything the workload states (tensor_parallel, pipeline_parallel, sharding,
checkpointing, micro_batch, grad_accum, global_batch, batch) is pinned.

Works on one shape at a time; memory per layout is cached by the caller (it does not
depend on the GPU model), nothing else; it must not look at prices.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from cloudgpu.catalog.gpus import GpuSpec
from cloudgpu.planner.frameworks import resolve
from cloudgpu.planner.memory import GIB, Layout, memory_breakdown, usable_fraction
from cloudgpu.planner.timing import infer_time, train_time
from cloudgpu.planner.workload import Workload

SHARDINGS = ("ddp", "zero1", "zero2", "zero3")
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
TENSOR_PARALLEL = (1, 2, 4, 8)
AUTO_BATCHES = (256, 128, 64, 32, 16, 8, 4, 2, 1)
TRAIN_BATCH_TOKENS = 2**21  # default global batch for pretraining: ~2M tokens (Llama 2: 4M)
FINETUNE_BATCH = 128  # sequences (Stanford Alpaca, LitGPT's fine-tuning default)

# Memory per workload and layout: it does not depend on the GPU model, so one entry serves
# every machine with the same GPUs per node and nodes.
MemoryCache = dict[Workload, dict[Layout, tuple[dict[str, float], float]]]


@dataclass(frozen=True)
class Shape:
    """What the fit depends on: the GPU, how many, and how they are connected."""

    memory_gib: float  # what a program can allocate on one GPU (catalog.gpus.usable_gib)
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
    memory_gib: float = 0.0  # per GPU
    hours: float | None = None  # compute wall-clock hours, scaling included
    scaling: float | None = None
    reason: str = ""
    fix: str = ""


def global_batch(w: Workload) -> int:
    """Sequences per optimizer step: the workload's, or ~2M tokens for pretraining and 128
    sequences for fine-tuning."""
    if w.global_batch:
        return w.global_batch
    if w.kind == "train":
        return max(1, round(TRAIN_BATCH_TOKENS / w.seq_len))
    return FINETUNE_BATCH


def _pipelines(w: Workload, shape: Shape) -> tuple[int, ...]:
    if w.pipeline_parallel:
        return (w.pipeline_parallel,)
    nodes = shape.num_nodes
    return tuple(p for p in range(1, nodes + 1) if nodes % p == 0 and p <= w.arch.layers)


def _tensors(w: Workload, shape: Shape) -> tuple[int, ...]:
    if w.tensor_parallel:
        return (w.tensor_parallel,)
    gpn = shape.gpus_per_node
    return tuple(t for t in TENSOR_PARALLEL if t <= gpn and gpn % t == 0 and w.arch.heads % t == 0)


def _splits(w: Workload, shape: Shape) -> list[tuple[int, int]]:
    """(TP, PP) pairs to search. A stated global batch cannot be shared by more data-
    parallel replicas than it has sequences (Llama 2's 1,024 x 4k-token batch on 2,048
    GPUs needs model parallelism): such pairs are left out unless no pair keeps it."""
    pairs = [(tp, pp) for pp in _pipelines(w, shape) for tp in _tensors(w, shape)]
    if not w.global_batch:
        return pairs  # the default batch is a guess: a wider run may take a larger one
    kept = [
        (t, p) for t, p in pairs if shape.n_gpus // (t * p * w.context_parallel) <= w.global_batch
    ]
    return kept or pairs


def _checkpointings(w: Workload) -> tuple[str, ...]:
    if w.checkpointing != "auto":
        return (w.checkpointing,)
    if w.attention == "eager" or resolve(w.framework, w.kind).selective == "op":
        return ("none", "selective", "full")
    return ("none", "full")  # with flash attention selective keeps what none keeps


def _micro_batches(w: Workload, dp: int) -> tuple[int, ...]:
    if w.micro_batch:
        return (w.micro_batch,)
    cap = max(1, math.ceil(global_batch(w) / dp))
    return tuple(m for m in MICRO_BATCHES if m <= cap) or (1,)


def _accum(w: Workload, dp: int, mb: int) -> int:
    return w.grad_accum or max(1, math.ceil(global_batch(w) / (dp * mb)))


def _virtual_pipelines(w: Workload, pp: int) -> tuple[int, ...]:
    """Chunks per stage: the stated count, else 1, and where the framework interleaves
    (Megatron) every count that splits a stage's layers evenly, up to one per chunk."""
    if pp <= 1:
        return (1,)
    if w.virtual_pipeline:
        return (w.virtual_pipeline,)
    if not resolve(w.framework, w.kind).interleaved_pipeline:
        return (1,)
    per_stage = w.arch.layers // pp
    return tuple(v for v in range(1, per_stage + 1) if per_stage % v == 0)


def _layout(
    w: Workload,
    shape: Shape,
    tp: int,
    pp: int,
    sharding: str,
    ckpt: str,
    mb: int = 1,
    vp: int = 1,
) -> Layout:
    """One training layout of ``w`` on ``shape`` (built directly: the search makes many)."""
    dp = max(1, shape.n_gpus // (tp * pp * w.context_parallel))
    return Layout(
        shape.gpus_per_node,
        shape.num_nodes,
        tp,
        sharding,
        ckpt,
        w.optimizer,
        0,
        pp,
        mb,
        _accum(w, dp, mb),
        w.context_parallel,
        vp,
    )


def _shape_error(w: Workload, shape: Shape) -> str:
    if w.training and w.tensor_parallel and shape.gpus_per_node % w.tensor_parallel:
        return f"tensor_parallel {w.tensor_parallel} does not divide {shape.gpus_per_node} GPUs"
    if not w.training and w.tensor_parallel and shape.gpus_per_node % w.tensor_parallel:
        return f"tensor_parallel {w.tensor_parallel} does not divide {shape.gpus_per_node} GPUs"
    pp = w.pipeline_parallel
    if pp and shape.num_nodes % pp and (shape.n_gpus % (pp * max(1, w.tensor_parallel))):
        return f"pipeline_parallel {pp} does not divide {shape.num_nodes} nodes"
    return ""


class _Search:
    """The state of one shape's search: memory (cached across shapes) and the best yet."""

    def __init__(self, w: Workload, shape: Shape, spec: GpuSpec | None, cache: MemoryCache):
        self.w, self.shape, self.spec = w, shape, spec
        self.cache = cache.setdefault(w, {})
        self.capacity = shape.memory_gib * usable_fraction(w)
        self.best: tuple[float, Layout, float] | None = None  # hours, layout, scaling
        self.first_fit: Layout | None = None  # unknown speed: the most preferred fitting
        self.smallest: tuple[float, Layout] | None = None

    def memory(self, lay: Layout) -> tuple[dict[str, float], float]:
        got = self.cache.get(lay)
        if got is None:
            parts = memory_breakdown(self.w, lay)
            got = self.cache[lay] = (parts, sum(parts.values()) / GIB)
        return got

    @property
    def done(self) -> bool:
        """Without performance data the first layout that fits is the answer."""
        return self.first_fit is not None and not self.timed()

    def fits(self, lay: Layout) -> bool:
        need = self.memory(lay)[1]
        if self.smallest is None or need < self.smallest[0]:
            self.smallest = (need, lay)
        return need <= self.capacity

    def timed(self) -> bool:
        spec = self.spec
        return bool(spec and spec.bf16_tflops and (self.w.training or spec.memory_bw_tbs))

    def consider(self, lay: Layout) -> None:
        if self.first_fit is None:
            self.first_fit = lay
        if not self.timed():
            return
        hours, scaling = hours_of(self.w, lay, self.spec, self.shape)  # type: ignore[arg-type]
        if self.best is None or hours < self.best[0] * (1 - 1e-9):
            self.best = (hours, lay, scaling)

    def may_beat(self, lay: Layout) -> bool:
        """Whether ``lay``'s time (fitting or not) is below the best layout's yet."""
        if self.best is None or not self.timed():
            return True
        return hours_of(self.w, lay, self.spec, self.shape)[0] < self.best[0]  # type: ignore[arg-type]

    def lower_bound(self, lay: Layout) -> float:
        """Hours with perfect scaling: what no layout with this recomputation can beat."""
        assert self.spec is not None
        ideal = Layout(
            1, 1, 1, lay.sharding, lay.checkpointing, lay.optimizer, 0, 1, lay.micro_batch
        )
        return train_time(self.w, ideal, self.spec).compute_hours / self.shape.n_gpus


def hours_of(w: Workload, lay: Layout, spec: GpuSpec, shape: Shape) -> tuple[float, float]:
    if w.training:
        t = train_time(w, lay, spec, shape.network_gbps)
        return t.compute_hours, t.scaling_efficiency
    return infer_time(w, lay, spec).hours, 1.0


def _train_groups(w: Workload, shape: Shape) -> Iterator[tuple[str, int, int, int]]:
    for ckpt in _checkpointings(w):
        for tp, pp in _splits(w, shape):
            for vp in _virtual_pipelines(w, pp):
                yield ckpt, tp, pp, vp


def _feasible(s: _Search) -> bool:
    """Whether any layout fits: each (TP, PP) pair's leanest layout (ZeRO-3, full
    recomputation, the smallest micro-batch) needs the least memory of its group."""
    w, shape = s.w, s.shape
    ckpt = "full" if w.checkpointing == "auto" else w.checkpointing
    found = False
    for tp, pp in _splits(w, shape):
        dp = max(1, shape.n_gpus // (tp * pp * w.context_parallel))
        sharding = w.sharding if w.sharding != "auto" else ("zero3" if dp > 1 else "ddp")
        lay = _layout(w, shape, tp, pp, sharding, ckpt, _micro_batches(w, dp)[0])
        found = s.fits(lay) or found
    return found


def _search_training(s: _Search) -> None:
    w, shape = s.w, s.shape
    if not _feasible(s):
        return
    for ckpt, tp, pp, vp in _train_groups(w, shape):
        if s.done:
            return
        dp = max(1, shape.n_gpus // (tp * pp * w.context_parallel))
        block = ckpt == "full" and _block_recompute(w)
        bound = _layout(w, shape, 1, 1, "ddp", "none" if block else ckpt)
        if s.best is not None and s.lower_bound(bound) >= s.best[0]:
            continue
        shardings = (w.sharding,) if w.sharding != "auto" else SHARDINGS
        if dp == 1 and w.sharding == "auto":
            shardings = ("ddp",)  # nothing to shard over
        for sharding in shardings:  # the least sharded that fits dominates the rest
            fitting = _fitting(s, w, shape, dp, (tp, pp, vp, sharding, ckpt))
            if fitting:
                timed = fitting if (sharding == "zero3" or pp > 1 or block) else fitting[-1:]
                for lay in timed:
                    if not block:
                        s.consider(lay)
                    elif not s.fits(replace(lay, checkpointing="none")) and s.may_beat(
                        replace(lay, recompute_layers=1)  # no fewer layers recompute
                    ):
                        s.consider(_least_recompute(s, lay))
                if not block:  # with block recompute more sharding may recompute less
                    break


def _block_recompute(w: Workload) -> bool:
    """Whether full checkpointing may stop at some layers per chunk (Megatron's block
    method) rather than all: searched only when checkpointing is left to the planner."""
    return w.checkpointing == "auto" and resolve(w.framework, w.kind).block_recompute


def _least_recompute(s: _Search, lay: Layout) -> Layout:
    """``lay`` (full checkpointing, fitting) recomputing the fewest layers per chunk that
    still fit: memory falls and time grows with each layer recomputed."""
    per_chunk = math.ceil(s.w.arch.layers / (lay.pipeline_parallel * lay.virtual_pipeline))
    lo, hi = 1, per_chunk  # hi: all layers (known to fit)
    # Memory is linear in the layers recomputed: start from the count that line predicts.
    full, one = s.memory(lay)[1], s.memory(replace(lay, recompute_layers=1))[1]
    if per_chunk > 1 and one > full:
        guess = 1 + (one - s.capacity) / (one - full) * (per_chunk - 1)
        k = min(per_chunk, max(1, math.ceil(guess - 1e-9)))
        if s.fits(replace(lay, recompute_layers=k)):
            hi = k
            lo = max(1, k - 1)
        else:
            lo = k + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if s.fits(replace(lay, recompute_layers=mid)):
            hi = mid
        else:
            lo = mid + 1
    return lay if hi >= per_chunk else replace(lay, recompute_layers=hi)


def _fitting(
    s: _Search, w: Workload, shape: Shape, dp: int, group: tuple[int, int, int, str, str]
) -> list[Layout]:
    """The layouts of one group that fit, ascending micro-batch: memory only grows."""
    tp, pp, vp, sharding, ckpt = group
    out = []
    for mb in _micro_batches(w, dp):
        lay = _layout(w, shape, tp, pp, sharding, ckpt, mb, vp)
        if not s.fits(lay):
            break
        out.append(lay)
    return out


def _search_serving(s: _Search) -> None:
    w, shape = s.w, s.shape
    batches = (w.batch,) if w.batch else AUTO_BATCHES
    for tp in _tensors(w, shape):
        replicas = shape.n_gpus // tp
        cap = math.ceil(w.requests / replicas) if w.requests and not w.batch else 0
        for b in batches:
            if cap and b > cap:
                continue  # more concurrent sequences than requests: no gain
            lay = Layout(shape.gpus_per_node, shape.num_nodes, tp, "none", batch=b)
            if s.fits(lay):
                s.consider(lay)
                break
        if s.done:
            return


def estimate_shape(
    w: Workload, shape: Shape, spec: GpuSpec | None, cache: MemoryCache | None = None
) -> ShapeEstimate:
    """The fastest fitting layout of ``w`` on ``shape`` (or why nothing fits), no fix."""
    bad = _shape_error(w, shape)
    if bad:
        return ShapeEstimate(False, None, reason=bad)
    s = _Search(w, shape, spec, cache if cache is not None else {})
    (_search_training if w.training else _search_serving)(s)
    if s.best is not None:
        hours, lay, scaling = s.best
        parts, need = s.memory(lay)
        return ShapeEstimate(True, lay, _gib(parts), need, hours=hours, scaling=scaling)
    if s.first_fit is not None:  # fits, but no published performance: time unknown
        parts, need = s.memory(s.first_fit)
        return ShapeEstimate(True, s.first_fit, _gib(parts), need)
    if s.smallest is None:
        return ShapeEstimate(False, None, reason="no layout of this job suits this machine")
    need, lay = s.smallest
    how = f" even with {lay.describe()}" if lay.describe() else ""
    of = f"{usable_fraction(w):.0%} of " if usable_fraction(w) < 1 else ""
    return ShapeEstimate(
        False,
        lay,
        _gib(s.memory(lay)[0]),
        need,
        reason=f"needs {need:.1f} GiB per GPU > {of}{shape.memory_gib:.1f} GiB usable{how}",
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
    if w.training and w.tensor_parallel and shape.gpus_per_node > w.tensor_parallel:
        out.append(("tensor_parallel: auto", replace(w, tensor_parallel=0), shape))
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
    if w.training and shape.gpus_per_node >= 4:  # nobody clusters single-GPU boxes
        for m in (2, 4, 8, 16, 32, 64, 128):
            if m > shape.num_nodes:
                out.append((f"num_nodes: {m}", w, replace(shape, num_nodes=m)))
    return out


def suggest_fix(
    w: Workload, shape: Shape, spec: GpuSpec | None, cache: MemoryCache | None = None
) -> str:
    """The first single change (cheapest first) under which ``w`` fits, or a bigger GPU."""
    cache = cache if cache is not None else {}
    for label, w2, shape2 in _changes(w, shape):
        est = estimate_shape(w2, shape2, spec, cache)
        if est.fits:
            how = est.layout.describe() if est.layout else ""
            extra = f", {how}" if how else ""
            return f"{label} ({est.memory_gib:.1f} GiB/GPU{extra})"
    here = estimate_shape(w, shape, spec, cache)
    if here.layout is not None:
        how = here.layout.describe()
        need = here.memory_gib / usable_fraction(w)
        return f"a GPU with >= {math.ceil(need)} GiB usable" + (f" ({how})" if how else "")
    return "no single change fits it"


def min_gpus(
    w: Workload,
    memory_gib: float,
    spec: GpuSpec | None,
    max_gpus: int = 1024,
    cache: MemoryCache | None = None,
) -> ShapeEstimate | None:
    """The smallest shape (8 GPUs per node beyond one node) of this GPU that fits ``w``."""
    cache = cache if cache is not None else {}
    counts = [(k, 1) for k in (1, 2, 4, 8)]
    nodes = 2
    while 8 * nodes <= max_gpus and w.training:
        counts.append((8, nodes))
        nodes *= 2
    for per_node, n_nodes in counts:
        est = estimate_shape(w, Shape(memory_gib, per_node, n_nodes), spec, cache)
        if est.fits:
            return est
    return None
