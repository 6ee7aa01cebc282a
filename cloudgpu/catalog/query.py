"""Filtering and ranking offers: the engine behind `cloudgpu offers` (and the planner).

:class:`OfferQuery` holds the filters as plain values; :func:`parse_gpu` and friends
turn command-line text into them. :func:`apply_filters` keeps per-filter counts so an
empty result can say which filter removed the last offers. Ranking keeps only the top
``limit`` with a heap, so a million offers cost one pass, not a full sort. No I/O here.
"""

from __future__ import annotations

import fnmatch
import heapq
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.errors import CatalogError, ConfigError

SORTS = ("price", "gpu-hour", "perf-per-dollar", "memory-per-dollar")
GROUPINGS = ("gpu", "provider", "region")

_INF = float("inf")


@dataclass(frozen=True)
class Amount:
    """A count or size from the command line: exact ("8") or a floor ("8+")."""

    value: float
    at_least: bool = False

    def ok(self, x: float) -> bool:
        return x >= self.value - 1e-9 if self.at_least else abs(x - self.value) < 1e-6

    def __str__(self) -> str:
        return f"{self.value:g}{'+' if self.at_least else ''}"


_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gb|gib|g)?\s*(\+)?\s*$", re.I)


def parse_amount(text: str, what: str) -> Amount:
    """ "16", "16+", "128GB+", "1.5": ConfigError naming ``what`` otherwise."""
    m = _AMOUNT.match(str(text))
    if not m:
        raise ConfigError(f"{what}: '{text}' is not a number (expected e.g. 16, 16+ or 24GB+)")
    return Amount(float(m.group(1)), bool(m.group(3)))


@dataclass(frozen=True)
class OfferQuery:
    """The filters and ordering of `cloudgpu offers`. ``None`` means "any"."""

    gpu: str | None = None  # name/alias/family, "NAME:COUNT", or a memory floor "24GB+"
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
    extra_filters: tuple[tuple[str, Callable[[Offer], bool]], ...] = field(default=())


@dataclass(frozen=True)
class GpuFilter:
    names: frozenset[str] | None  # canonical names; None = any
    count: Amount | None
    memory_floor: float | None


_GPU_COUNT = re.compile(r"^(?P<name>[^:]+?)\s*:\s*(?P<count>\d+\+?)$")
_MEM_FLOOR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gb|gib)\s*\+?\s*$", re.I)


def parse_gpu(text: str, registry: GpuRegistry) -> GpuFilter:
    """ "H100" / "a100-80gb:8" / "24GB+" -> GpuFilter (CatalogError for unknown names)."""
    text = text.strip()
    mem = _MEM_FLOOR.match(text)
    if mem:
        return GpuFilter(None, None, float(mem.group(1)))
    m = _GPU_COUNT.match(text)
    name = m.group("name") if m else text
    count = parse_amount(m.group("count"), "--gpu count") if m else None
    if count is not None and count.value < 1:
        raise ConfigError(f"--gpu {text}: the GPU count must be at least 1")
    return GpuFilter(registry.matches(name), count, None)


def _check_contradictions(q: OfferQuery, gf: GpuFilter | None, registry: GpuRegistry) -> None:
    if q.sort not in SORTS:
        raise ConfigError(f"--sort: '{q.sort}' is not one of {', '.join(SORTS)}")
    if q.cheapest_per is not None and q.cheapest_per not in GROUPINGS:
        raise ConfigError(f"--cheapest-per: '{q.cheapest_per}' not one of {', '.join(GROUPINGS)}")
    if q.market not in (None, "spot", "on_demand"):
        raise ConfigError(f"market '{q.market}' is not spot or on_demand")
    if q.max_price is not None and q.max_price <= 0:
        raise ConfigError(f"--max-price {q.max_price:g}: must be more than 0 USD per hour")
    if q.limit is not None and q.limit < 1:
        raise ConfigError(f"--limit {q.limit}: must be at least 1")
    if gf and gf.count and q.gpus and not (gf.count.ok(q.gpus.value) or q.gpus.ok(gf.count.value)):
        raise ConfigError(f"--gpu asks for {gf.count} GPUs but --gpus asks for {q.gpus}")
    if gf and gf.names and q.min_gpu_memory:
        biggest = max(registry.require(n).memory_gb for n in gf.names)
        if biggest < q.min_gpu_memory * 0.93:  # 7%: providers report GiB-vs-GB sizes
            raise ConfigError(
                f"--min-gpu-memory {q.min_gpu_memory:g} GB contradicts --gpu {q.gpu}: "
                f"it has at most {biggest:g} GB per GPU"
            )


Step = tuple[str, Callable[[Offer], bool]]


def _gpu_steps(q: OfferQuery, gf: GpuFilter | None, registry: GpuRegistry) -> list[Step]:
    """GPU steps come first: naming a GPU is the most selective filter, so the later
    steps see few offers. Named GPUs imply their kind; otherwise non-GPU accelerators
    (ASICs, FPGAs, TPUs) are left out unless asked for."""
    steps: list[Step] = []
    if gf and gf.names is not None:
        names = gf.names
        steps.append((f"--gpu {q.gpu}", lambda o: o.gpu in names))
    elif not q.include_non_gpu:
        non_gpu = frozenset(s.name for s in registry.all() if not s.is_gpu)
        steps.append(("GPUs only (add --all-accelerators)", lambda o: o.gpu not in non_gpu))
    if gf and gf.count is not None:
        count = gf.count
        steps.append((f"--gpu {q.gpu} (count)", lambda o: count.ok(o.gpu_count)))
    floor = max(gf.memory_floor or 0.0 if gf else 0.0, q.min_gpu_memory or 0.0)
    if floor:
        label = "--min-gpu-memory" if q.min_gpu_memory else f"--gpu {q.gpu}"
        # 7% slack: AWS reports a 24 GB L4 as 22888 MiB; snapping happens in conversion,
        # but refreshed offers may carry the raw figure.
        steps.append((f"{label} {floor:g}GB", lambda o: o.gpu_memory_gb >= floor * 0.93))
    return steps


def build_steps(q: OfferQuery, registry: GpuRegistry) -> list[Step]:
    """The active filters, in the order they are applied, each with a user-facing label."""
    gf = parse_gpu(q.gpu, registry) if q.gpu else None
    _check_contradictions(q, gf, registry)
    steps = _gpu_steps(q, gf, registry)
    if q.gpus is not None:
        gpus = q.gpus
        steps.append((f"--gpus {gpus}", lambda o: gpus.ok(o.gpu_count)))
    if q.cpus is not None:
        cpus = q.cpus
        steps.append((f"--cpus {cpus}", lambda o: cpus.ok(o.vcpus)))
    if q.memory is not None:
        mem = q.memory
        steps.append((f"--memory {mem}", lambda o: mem.ok(o.memory_gb)))
    if q.nvme_gb:
        nvme = q.nvme_gb
        steps.append((f"--nvme {nvme:g}GB", lambda o: o.nvme_count * o.nvme_size_gb >= nvme))
    if q.market:
        market = q.market
        steps.append((f"--{market.replace('_', '-')}", lambda o: o.market == market))
    if q.free:
        steps.append(("--free", lambda o: FLAG_FREE_TIER in o.flags))
    elif not q.providers:
        steps.append(("paid offers (add --free)", lambda o: FLAG_FREE_TIER not in o.flags))
    if q.providers:
        provs = frozenset(q.providers)
        steps.append((f"--provider {','.join(q.providers)}", lambda o: o.provider in provs))
    if q.regions:
        steps.append((f"--region {','.join(q.regions)}", _region_predicate(q.regions)))
    if q.max_price is not None:
        cap = q.max_price
        steps.append((f"--max-price {cap:g}", lambda o: o.price_per_hour <= cap))
    steps.extend(q.extra_filters)
    return steps


def _region_predicate(globs: Iterable[str]) -> Callable[[Offer], bool]:
    pattern = re.compile("|".join(fnmatch.translate(g.lower()) for g in globs))
    memo: dict[tuple[str, str], bool] = {}

    def ok(o: Offer) -> bool:
        key = (o.region, o.zone)
        hit = memo.get(key)
        if hit is None:
            hit = bool(pattern.match(o.region.lower()) or pattern.match(o.zone.lower()))
            memo[key] = hit
        return hit

    return ok


def apply_filters(
    offers: list[Offer], steps: list[Step]
) -> tuple[list[Offer], list[tuple[str, int]]]:
    """Survivors, and how many were left after each step (for empty-result messages)."""
    counts: list[tuple[str, int]] = []
    current = offers
    for label, pred in steps:
        current = [o for o in current if pred(o)]
        counts.append((label, len(current)))
        if not current:
            break
    return current, counts


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
