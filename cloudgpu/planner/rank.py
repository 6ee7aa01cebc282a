"""plan(): filter offers by a job's resources, size and time its workload on each machine
shape, cost every candidate end to end, and rank them by the chosen objective.

Objectives:
- ``cheapest``: estimated total cost = hours x price, where hours include compute (with
  scaling and data stalls), data staging, startup and the expected spot-interruption
  loss; candidates above limits.max_cost, or whose estimated hours exceed
  limits.max_runtime (the run would be stopped unfinished), are rejected.
- ``fastest``: estimated wall-clock hours, among candidates within limits.max_cost.
- ``hourly``: plain $/hour (what other tools rank by); also what every objective falls
  back to when the job has no workload block to estimate from.

Compute hours are corrected by the user's own measured runs on the same GPU family and
model size when there are any (cloudgpu.planner.calibrate).

Ties break on $/hour, then the offer's key, so the order is deterministic. The offers,
the GPU registry, the startup history and the measured runs are passed in; nothing here
loads them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cloudgpu.catalog.gpus import GpuRegistry, GpuSpec, usable_gib
from cloudgpu.catalog.offer import Offer
from cloudgpu.catalog.requirements import Filter, from_resources
from cloudgpu.costs import billing
from cloudgpu.errors import ConfigError
from cloudgpu.planner.calibrate import RunHistory
from cloudgpu.planner.candidate import Candidate, Estimates, Plan
from cloudgpu.planner.fit import (
    Shape,
    ShapeEstimate,
    estimate_shape,
    min_gpus,
    suggest_fix,
)
from cloudgpu.planner.overhead import (
    StartupHistory,
    spot_extra_hours,
    staging_hours,
    stall_fraction,
)
from cloudgpu.planner.sessions import is_free_tier, session_plan
from cloudgpu.planner.workload import Workload, parse_workload
from cloudgpu.provider import Capabilities
from cloudgpu.spec.model import JobSpec, Limits

OBJECTIVES = ("cheapest", "fastest", "hourly")


def workload_of(job: JobSpec) -> Workload | None:
    if not job.workload:
        return None
    if job.resources.gpu.cpu_only:
        raise ConfigError(
            f"{job.source or '<job>'}: workload: sizing needs GPUs, but resources.gpu is none",
            hint="drop the workload block or request a GPU",
        )
    try:
        return parse_workload(job.workload)
    except ConfigError as exc:
        where = f"{job.source}: " if job.source else ""
        raise ConfigError(f"{where}{exc}", hint=exc.hint) from exc


@dataclass
class _Context:
    w: Workload | None
    registry: GpuRegistry
    history: StartupHistory
    runs: RunHistory
    data_bytes: float
    num_nodes: int
    has_checkpoint: bool = False
    cache: Estimates = field(default_factory=Estimates)
    # A provider's capabilities by name: how it bills (granularity, minimum), so the
    # estimated cost is what the watcher and status will charge (cloudgpu.costs.billing).
    caps_of: Callable[[str], Capabilities] = field(default=lambda name: _per_second(name))

    def spec(self, gpu: str) -> GpuSpec | None:
        return self.registry.spec(gpu)

    def shape_estimate(self, offer: Offer) -> ShapeEstimate:
        assert self.w is not None
        # Everything estimate_shape reads from the offer (the spec comes from its GPU).
        key = (
            self.w,
            self.num_nodes,
            offer.gpu,
            offer.gpu_memory_gb,
            offer.gpu_count,
            offer.network_gbps,
        )
        est = self.cache.shapes.get(key)
        if est is None:
            spec = self.spec(offer.gpu)
            # What a program can allocate, not the label (a table without per-GPU memory,
            # 0, falls back to the GPU's own figure).
            memory = usable_gib(offer.gpu_memory_gb, spec)
            shape = Shape(memory, offer.gpu_count, self.num_nodes, offer.network_gbps)
            est = estimate_shape(self.w, shape, spec, self.cache.memory)
            if not est.fits and est.layout is not None:
                est = _with_fix(est, self.fix(shape))
            self.cache.shapes[key] = est
        return est

    def fix(self, shape: Shape) -> str:
        """Fixes depend on memory only, so one search serves every GPU of that size."""
        assert self.w is not None
        key = (self.w, shape.memory_gib, shape.gpus_per_node, shape.num_nodes)
        fix = self.cache.fixes.get(key)
        if fix is None:
            fix = self.cache.fixes[key] = suggest_fix(self.w, shape, None, self.cache.memory)
        return fix


def _with_fix(est: ShapeEstimate, fix: str) -> ShapeEstimate:
    return replace(est, fix=fix)


def _costed(ctx: _Context, offer: Offer, est: ShapeEstimate) -> Candidate:
    w = ctx.w
    assert w is not None
    price = offer.price_per_hour * ctx.num_nodes
    cand = Candidate(
        offer,
        est.fits,
        est.reason,
        ctx.num_nodes,
        round(est.memory_gib, 2),
        est.breakdown,
        price_per_hour=price,
        fix=est.fix,
        layout=est.layout.describe() if est.layout else "",
        scaling_efficiency=est.scaling,
    )
    if not est.fits or est.hours is None:
        if est.fits:
            cand.reason = f"no performance data for GPU {offer.gpu}: time not estimated"
        return cand
    stall = stall_fraction(
        w.samples_per_s,
        w.bytes_per_sample,
        offer.gpu_count,
        offer.nvme_count,
        offer.vcpus,
        w.cpu_samples_per_s,
    )
    cal = ctx.runs.calibration(w, ctx.spec(offer.gpu), ctx.registry)
    measured = est.hours / cal.factor if cal is not None else est.hours
    cand.calibration = cal.describe() if cal is not None else ""
    compute = measured / max(1e-6, 1.0 - stall)
    startup_s = ctx.history.startup_s(offer.provider)
    spot = 0.0
    if offer.market == "spot":
        spot = spot_extra_hours(
            compute, w.spot_interruptions_per_hour, w.checkpoint_minutes, startup_s
        )
    staging = staging_hours(ctx.data_bytes, offer.network_gbps, offer.nvme_count)
    hours = compute + staging + startup_s / 3600.0 + spot
    cand.stall_fraction, cand.staging_hours = stall, staging
    cand.startup_hours, cand.spot_penalty_hours = startup_s / 3600.0, spot
    cand.est_hours = hours
    cand.est_cost = billing.estimate(price, hours, ctx.caps_of(offer.provider))
    cand.est_gpu_hours = hours * offer.gpu_count * ctx.num_nodes
    cand.tokens_per_s = _tokens(w) / (compute * 3600.0) if compute > 0 else None
    return cand


def _tokens(w: Workload) -> float:
    """Tokens the run processes: trained tokens, or prompt + generated tokens."""
    if w.training or not w.requests:
        return w.tokens
    return w.requests * (w.input_tokens + w.output_tokens)


def _candidate(ctx: _Context, missing: str, offer: Offer, limits: Limits) -> Candidate:
    """One offer judged: resources first, then the workload's fit, time and budget."""
    price = offer.price_per_hour * ctx.num_nodes
    if missing:
        return Candidate(offer, False, missing, ctx.num_nodes, price_per_hour=price)
    if ctx.w is None:
        return Candidate(offer, True, "", ctx.num_nodes, price_per_hour=price)
    cand = _costed(ctx, offer, ctx.shape_estimate(offer))
    if cand.fits and is_free_tier(offer) and cand.est_hours is not None:
        _apply_sessions(cand, ctx.has_checkpoint)
    if cand.fits:
        _apply_limits(cand, limits)
    return cand


def _apply_sessions(cand: Candidate, has_checkpoint: bool) -> None:
    """A free tier runs in sessions of limited length: split only through a checkpoint."""
    assert cand.est_hours is not None
    chain = session_plan(cand.offer, cand.est_hours, has_checkpoint)
    if not chain.fits:
        cand.fits, cand.reason = False, chain.reason
        return
    cand.est_hours += chain.extra_hours
    cand.note = chain.note


def _apply_limits(cand: Candidate, limits: Limits) -> None:
    """Reject a candidate the job's own limits would stop: over max_cost, or so slow that
    max_runtime would end the run before it finishes (paying for a run that is killed)."""
    if limits.max_cost is not None and (cand.est_cost or 0.0) > limits.max_cost:
        cand.fits = False
        cand.reason = f"estimated ${cand.est_cost:,.2f} > limits.max_cost ${limits.max_cost:,.2f}"
    elif (
        limits.max_runtime_s is not None
        and cand.est_hours is not None
        and cand.est_hours * 3600.0 > limits.max_runtime_s
    ):
        cand.fits = False
        cand.reason = (
            f"estimated {cand.est_hours:,.1f} h > limits.max_runtime "
            f"{limits.max_runtime_s / 3600.0:,.1f} h"
        )


def _sort_key(objective: str, c: Candidate) -> tuple[float, float, float, str]:
    cost = c.est_cost if c.est_cost is not None else math.inf
    hours = c.est_hours if c.est_hours is not None else math.inf
    if objective == "fastest":
        return (hours, cost, c.price_per_hour, c.offer.key)
    if objective == "cheapest":
        return (cost, c.price_per_hour, hours, c.offer.key)
    return (c.price_per_hour, cost, hours, c.offer.key)


def _per_second(name: str) -> Capabilities:
    return Capabilities()


def plan(
    job: JobSpec,
    offers: Sequence[Offer],
    *,
    registry: GpuRegistry,
    objective: str = "cheapest",
    history: StartupHistory | None = None,
    runs: RunHistory | None = None,
    data_bytes: int | None = None,
    provider_regions: Mapping[str, Sequence[str]] | None = None,
    estimates: Estimates | None = None,
    capabilities: Callable[[str], Capabilities] | None = None,
) -> Plan:
    """Rank ``offers`` for ``job`` (see module docstring). ``provider_regions``: the
    configured ``[providers.NAME] regions`` (cloudgpu.catalog.requirements);
    ``estimates``: shape estimates kept from earlier calls (:class:`Estimates`);
    ``capabilities``: each provider's, for its billing (default: per second)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective '{objective}' (one of {', '.join(OBJECTIVES)})")
    w = workload_of(job)
    size = float(data_bytes) if data_bytes is not None else (w.data_size if w else 0.0)
    cache = estimates if estimates is not None else Estimates()  # shared by every count
    ctxs = [
        _Context(
            w,
            registry,
            history or StartupHistory(),
            runs or RunHistory(),
            size,
            n,
            bool(job.checkpoint),
            cache,
            capabilities or _per_second,
        )
        for n in job.node_counts
    ]
    ctx = ctxs[0]
    reqs = from_resources(
        job.resources, needs_gpu=w is not None, provider_regions=provider_regions
    ).compile(registry)
    effective = objective if w is not None else "hourly"
    fitting, rejected = _judge(ctxs, reqs, offers, job.limits, effective)
    free = _unnamed_free_tiers(ctx, job, offers, rejected, registry, provider_regions)
    result = Plan(fitting, rejected, objective, workload=w, free=free)
    result.summary = _summary(result, len(offers), effective)
    if not fitting and w is not None:
        result.needs = _nothing_fits(ctx, rejected, offers, job.limits)
    return result


def _judge(
    ctxs: list[_Context],
    reqs: Filter,
    offers: Sequence[Offer],
    limits: Limits,
    effective: str,
) -> tuple[list[Candidate], list[Candidate]]:
    """(fitting, rejected) candidates, each list in its order. One context per node
    count the job allows ("num_nodes: 1-4"): each offer is judged at every count and
    keeps its best by the objective (cost, time), scaling included. The contexts share
    one Estimates: its entries are keyed by node count."""
    fitting: list[Candidate] = []
    rejected: list[Candidate] = []
    for offer in offers:
        reason = reqs.reason(offer)
        cands = [_candidate(c, reason, offer, limits) for c in ctxs]
        fits = [c for c in cands if c.fits]
        cand = min(fits, key=lambda c: _sort_key(effective, c)) if fits else cands[0]
        (fitting if cand.fits else rejected).append(cand)
    fitting.sort(key=lambda c: _sort_key(effective, c))
    rejected.sort(key=lambda c: (c.price_per_hour, c.offer.key))
    return fitting, rejected


def _unnamed_free_tiers(
    ctx: _Context,
    job: JobSpec,
    offers: Sequence[Offer],
    rejected: Sequence[Candidate],
    registry: GpuRegistry,
    provider_regions: Mapping[str, Sequence[str]] | None,
) -> list[Candidate]:
    """Free-tier offers turned away only because the job does not name their provider:
    judged as if it did, so the plan can say "this also fits Kaggle's free T4s"."""
    turned_away = [c.offer for c in rejected if c.reason.startswith("free tier:")]
    if not turned_away:
        return []
    named = tuple(dict.fromkeys([*job.resources.providers, *(o.provider for o in turned_away)]))
    relaxed = from_resources(
        replace(job.resources, providers=named),
        needs_gpu=ctx.w is not None,
        provider_regions=provider_regions,
    ).compile(registry)
    out = [_candidate(ctx, relaxed.reason(o), o, job.limits) for o in turned_away]
    fits = [c for c in out if c.fits]
    return sorted(fits, key=lambda c: (c.est_hours or 0.0, c.offer.key))


def _nothing_fits(
    ctx: _Context,
    rejected: list[Candidate],
    offers: Sequence[Offer],
    limits: Limits,
) -> str:
    """Why nothing fits: over budget (say the cheapest), too slow for max_runtime (say the
    fastest), or too big (say what would fit)."""
    costed = [c for c in rejected if c.est_cost is not None]
    over_budget = [c for c in costed if "limits.max_cost" in c.reason]
    max_cost = limits.max_cost
    if over_budget and max_cost is not None:
        low = min(over_budget, key=lambda c: (c.est_cost or 0.0, c.offer.key))
        return (
            f"the cheapest estimate, ${low.est_cost:,.2f} on {low.gpu_count}x {low.offer.gpu}"
            f" ({low.offer.provider} {low.offer.instance_type}), exceeds limits.max_cost"
            f" ${max_cost:,.2f}"
        )
    chained = [c for c in costed if "free-tier sessions" in c.reason]
    if chained and not any(c.fits for c in rejected):
        first = min(chained, key=lambda c: (c.est_hours or 0.0, c.offer.key))
        return f"{first.offer.provider} {first.offer.instance_type} {first.reason}"
    too_slow = [c for c in costed if "limits.max_runtime" in c.reason]
    if too_slow and limits.max_runtime_s is not None:
        fast = min(too_slow, key=lambda c: (c.est_hours or 0.0, c.offer.key))
        return (
            f"the fastest estimate, {fast.est_hours:,.1f} h on {fast.gpu_count}x "
            f"{fast.offer.gpu} ({fast.offer.provider} {fast.offer.instance_type}), exceeds "
            f"limits.max_runtime {limits.max_runtime_s / 3600.0:,.1f} h"
        )
    if ctx.w is not None and any(c.memory_per_gpu_gib is not None for c in rejected):
        return needs(ctx.w, offers, ctx.registry, ctx.cache)
    return ""


def _summary(p: Plan, total: int, effective: str) -> str:
    head = f"{len(p.candidates)} of {total} offers fit"
    if p.workload is None:
        return head + "; no workload block, ranked by $/hour"
    if effective != p.objective:
        return head + f"; ranked by {effective}"
    return head + f"; ranked by {p.objective}"


def needs(
    w: Workload, offers: Sequence[Offer], registry: GpuRegistry, cache: Estimates | None = None
) -> str:
    """What would fit when nothing does: the fewest GPUs of the largest memory sizes."""
    cache = cache if cache is not None else Estimates()
    sizes: dict[float, GpuSpec | None] = {}
    for o in offers:
        spec = registry.spec(o.gpu) if o.gpu_count else None
        if spec is not None and spec.is_gpu and o.gpu_memory_gb not in sizes:
            sizes[o.gpu_memory_gb] = spec
    if not sizes:
        sizes = {80.0: registry.spec("H100-SXM")}
    options = []
    for mem in sorted(sizes, reverse=True)[:3]:
        spec = sizes[mem]
        key = (w, mem, spec.name if spec else "")
        if key not in cache.smallest:
            cache.smallest[key] = min_gpus(w, usable_gib(mem, spec), spec, cache=cache.memory)
        est = cache.smallest[key]
        if est is not None and est.layout is not None:
            how = est.layout.describe()
            options.append(f"{est.layout.n_gpus}x{mem:g} GB" + (f" with {how}" if how else ""))
    if not options:
        return "needs more than 1024 GPUs of any size offered"
    return "needs " + " or ".join(options)
