"""Filtering and ranking offers: the engine behind `cloudgpu offers` and `report offers`.

:class:`OfferQuery` holds the flags as plain values; :func:`requirements` turns them
into the one cloudgpu.catalog.requirements filter every command uses (the planner builds
the same from a job). Per-filter counts let an empty result say which filter removed the
last offers. Ranking keeps only the top
``limit`` with a heap, so a million offers cost one pass, not a full sort. No I/O here.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import Offer
from cloudgpu.catalog.requirements import (
    Amount,
    Filter,
    Requirements,
    normalize_provider_regions,
    parse_amount,
)
from cloudgpu.errors import CatalogError, ConfigError
from cloudgpu.spec import units
from cloudgpu.spec.model import GpuRequest

__all__ = ["Amount", "OfferQuery", "parse_amount", "query_offers", "rank", "require_offers"]

SORTS = ("price", "gpu-hour", "perf-per-dollar", "memory-per-dollar")
GROUPINGS = ("gpu", "provider", "region")

_INF = float("inf")


@dataclass(frozen=True)
class OfferQuery:
    """The filters and ordering of `cloudgpu offers`. ``None`` means "any"."""

    gpu: str | None = None  # the one GPU syntax (cloudgpu.spec.units.parse_gpu)
    gpus: Amount | None = None  # GPUs per instance
    min_gpu_memory: float | None = None  # GB per GPU
    cpus: Amount | None = None
    memory: Amount | None = None  # GB of RAM
    nvme_gb: float | None = None  # at least this much local NVMe in total
    market: str | None = None  # "spot" | "on_demand"
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()  # globs, matched against region and zone
    max_price: float | None = None  # USD per instance-hour
    sort: str = "price"
    cheapest_per: str | None = None  # "gpu" | "provider" | "region"
    limit: int | None = None
    include_non_gpu: bool = False  # ASICs, FPGAs and TPUs; also on when --gpu names one
    # Free tiers (Kaggle, Colab): True = only them; False = left out unless --provider
    # names them (they are not rentable machines and would top every price sort).
    free: bool = False
    provider_regions: Mapping[str, Sequence[str]] = field(default_factory=dict)  # config


def parse_gpu(text: str) -> GpuRequest:
    """``--gpu`` text in the one GPU syntax; ConfigError naming the flag otherwise."""
    try:
        req = units.parse_gpu(text)
    except ValueError as exc:
        raise ConfigError(f"--gpu {text}: {exc}") from None
    return req


def gpu_names(text: str, registry: GpuRegistry) -> frozenset[str] | None:
    """Canonical names ``--gpu`` names (None: no particular GPU); CatalogError if unknown."""
    req = parse_gpu(text)
    return registry.matches(req.name) if req.name else None


def _check_contradictions(q: OfferQuery, gpu: GpuRequest | None, registry: GpuRegistry) -> None:
    if q.sort not in SORTS:
        raise ConfigError(f"--sort: '{q.sort}' is not one of {', '.join(SORTS)}")
    if q.cheapest_per is not None and q.cheapest_per not in GROUPINGS:
        raise ConfigError(f"--cheapest-per: '{q.cheapest_per}' not one of {', '.join(GROUPINGS)}")
    if q.market not in (None, "spot", "on_demand"):
        raise ConfigError(f"market '{q.market}' is not spot or on_demand")
    if q.max_price is not None and not q.max_price > 0:
        raise ConfigError(f"--max-price {q.max_price:g}: must be more than 0 USD per hour")
    if q.limit is not None and q.limit < 1:
        raise ConfigError(f"--limit {q.limit}: must be at least 1")
    if gpu is None:
        return
    count = Amount(float(gpu.count), gpu.count_at_least) if gpu.count is not None else None
    if count and q.gpus and not (count.ok(q.gpus.value) or q.gpus.ok(count.value)):
        raise ConfigError(f"--gpu asks for {count} GPUs but --gpus asks for {q.gpus}")
    if gpu.name and q.min_gpu_memory:
        biggest = max(registry.require(n).memory_gb for n in registry.matches(gpu.name))
        if biggest < q.min_gpu_memory:
            raise ConfigError(
                f"--min-gpu-memory {q.min_gpu_memory:g} GB contradicts --gpu {q.gpu}: "
                f"it has at most {biggest:g} GB per GPU"
            )


def requirements(q: OfferQuery, registry: GpuRegistry) -> Requirements:
    """The query's filters as the one :class:`Requirements` every command uses."""
    gpu = parse_gpu(q.gpu) if q.gpu else None
    _check_contradictions(q, gpu, registry)
    g = gpu or GpuRequest()
    return Requirements(
        gpu=g,
        gpu_text=q.gpu or "",
        gpu_required=gpu is not None and not g.cpu_only,
        accelerators=q.include_non_gpu,
        gpus=q.gpus,
        min_gpu_memory_gb=q.min_gpu_memory,
        cpus=q.cpus,
        memory_gb=q.memory,
        nvme_gb=q.nvme_gb,
        market=q.market,
        providers=q.providers,
        regions=q.regions,
        max_price=q.max_price,
        provider_regions=normalize_provider_regions(q.provider_regions),
        free_only=q.free,
        labels="flags",
    )


def build_steps(q: OfferQuery, registry: GpuRegistry) -> Filter:
    """The active filters, in the order they are applied, each with a user-facing label."""
    return requirements(q, registry).compile(registry)


def apply_filters(offers: list[Offer], steps: Filter) -> tuple[list[Offer], list[tuple[str, int]]]:
    """Survivors, and how many were left after each step (for empty-result messages)."""
    return steps.apply(offers)


def explain_empty(start: int, counts: list[tuple[str, int]], total: int | None = None) -> str:
    """ "no offers left: --max-price 1 removed the last 37 (of 9120 in the catalog)".

    ``start``: offers the filters began with; ``total``: catalog size (default start).
    """
    total = start if total is None else total
    before = start
    for label, n in counts:
        if n == 0:
            return f"no offers left: {label} removed the last {before} (of {total} in the catalog)"
        before = n
    return "the catalog holds no offers" if start == 0 else "no offers matched"


def sort_key(sort: str, registry: GpuRegistry) -> Callable[[Offer], tuple[float, str]]:
    """Ascending key: lower is better for every sort (perf/memory per dollar inverted)."""
    if sort == "price":
        return lambda o: (o.price_per_hour, o.key)
    if sort == "gpu-hour":
        return lambda o: (o.price_per_gpu_hour, o.key)
    if sort == "memory-per-dollar":
        return lambda o: (o.price_per_gb_hour, o.key)
    specs = {s.name: (s.bf16_tflops, s.memory_gb) for s in registry.all()}

    def per_pflop(o: Offer) -> tuple[float, str]:
        v = o.price_per_pflop_hour(*specs.get(o.gpu, (None, None)))
        return (_INF if v is None else v, o.key)

    return per_pflop


def rank(
    offers: list[Offer],
    sort: str,
    registry: GpuRegistry,
    *,
    cheapest_per: str | None = None,
    limit: int | None = None,
) -> list[Offer]:
    key = sort_key(sort, registry)
    if cheapest_per:
        best: dict[str, tuple[tuple[float, str], Offer]] = {}
        for o in offers:
            group = getattr(o, cheapest_per)
            k = key(o)
            cur = best.get(group)
            if cur is None or k < cur[0]:
                best[group] = (k, o)
        offers = [o for _, o in best.values()]
    if limit is not None and limit < len(offers):
        return heapq.nsmallest(limit, offers, key=key)
    return sorted(offers, key=key)


def run_query(
    offers: list[Offer], query: OfferQuery, registry: GpuRegistry
) -> tuple[list[Offer], list[tuple[str, int]]]:
    """Filter and rank; also returns the per-step counts."""
    kept, counts = apply_filters(offers, build_steps(query, registry))
    ranked = rank(kept, query.sort, registry, cheapest_per=query.cheapest_per, limit=query.limit)
    return ranked, counts


def query_offers(offers: list[Offer], query: OfferQuery, registry: GpuRegistry) -> list[Offer]:
    """Filtered, ranked offers (an empty list when nothing matches)."""
    return run_query(offers, query, registry)[0]


def require_offers(
    offers: list[Offer], query: OfferQuery, registry: GpuRegistry, *, total: int | None = None
) -> list[Offer]:
    """Like :func:`query_offers`, but an empty result is a CatalogError saying which
    filter removed the last offers (``total``: catalog size to quote, default len)."""
    ranked, counts = run_query(offers, query, registry)
    if not ranked:
        raise CatalogError(explain_empty(len(offers), counts, total))
    return ranked
