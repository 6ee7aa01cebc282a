"""The one requirements filter: which offers meet what a user asked for, and why not.

Every command that chooses machines goes through here: `offers` and `report offers`
build :class:`Requirements` from their flags, `plan`, `launch`, `runner start` and
`report plan` from a job's ``resources:`` block (:func:`from_resources`). Both compile
to the same ordered :class:`Check` list, so a GPU name, a count, a memory floor, a
region glob or a market means the same thing everywhere.

Semantics, once:

* GPU: one syntax (cloudgpu.spec.units.parse_gpu): a name, family or alias, an optional
  count (``:8`` exactly, ``:8+`` at least), a memory floor (``24GB+``), ``any`` or
  ``none`` (CPU only). Without a named GPU, "a GPU" means a CUDA/ROCm GPU, never an ASIC
  such as Inferentia (those run only their vendor's SDK) unless accelerators are asked
  for; a GPU the registry does not know is kept.
* GPU memory floors compare the offer's per-GPU figure exactly: there is no slack here.
  Providers that report binary sizes (AWS says 22888 MiB for a 24 GB L4) snap them to
  the GPU's datasheet figure in their own parsing code, so a 100 GB floor never admits a
  94 GB H100 NVL or a 96 GB GH200.
* Regions are case-insensitive globs matched against the region *or* the zone.
* A provider's configured regions (``[providers.NAME] regions = [...]`` in config.toml)
  keep that provider's offers to those regions, for every command alike.
* Free tiers (Kaggle, Colab) run under session limits and quotas the user must accept:
  their offers are used only where their provider is named (``resources.providers``,
  ``--provider``), or, with `offers --free`, only they are shown.

Each check returns "" when the offer passes, else a short reason "what (this offer's
value)": the text before " (" groups offers that miss the same requirement. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.errors import ConfigError
from cloudgpu.spec.model import GpuRequest, Resources

# Sizes are compared exactly; this only absorbs float noise in converted figures.
_EPS = 1e-6


@dataclass(frozen=True)
class Amount:
    """A count or size: exact ("8") or a floor ("8+")."""

    value: float
    at_least: bool = False

    def ok(self, x: float) -> bool:
        return x >= self.value - _EPS if self.at_least else abs(x - self.value) < _EPS

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
class Requirements:
    """What a machine must have; ``None``/empty means "any".

    ``labels`` says how a requirement is named in messages about empty results: the
    offers command names its flags (``--max-price 1``), a job its keys."""

    gpu: GpuRequest = field(default_factory=GpuRequest)
    gpu_text: str = ""  # the user's spelling, for messages
    gpu_required: bool = False  # the offer must have at least one GPU
    accelerators: bool = False  # non-GPU accelerators (ASICs, FPGAs, TPUs) are acceptable
    gpus: Amount | None = None  # GPUs per instance (besides a count in ``gpu``)
    min_gpu_memory_gb: float | None = None  # per GPU (besides a floor in ``gpu``)
    cpus: Amount | None = None
    memory_gb: Amount | None = None
    nvme_gb: float | None = None  # local NVMe in total, at least
    market: str | None = None  # "spot" | "on_demand"
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()  # globs, matched against region and zone
    max_price: float | None = None  # USD per instance-hour
    provider_regions: tuple[tuple[str, tuple[str, ...]], ...] = ()  # from config.toml
    free_only: bool = False  # only free tiers (`offers --free`)
    labels: str = "job"  # "job" | "flags"

    def compile(self, registry: GpuRegistry) -> Filter:
        return Filter(tuple(_checks(self, registry)))


@dataclass(frozen=True)
class Check:
    label: str  # names the requirement (for "removed the last N" messages)
    reason: Callable[[Offer], str]  # "" = the offer passes


@dataclass(frozen=True)
class Filter:
    """Compiled requirements, in the order their reasons are reported."""

    checks: tuple[Check, ...]

    def reason(self, offer: Offer) -> str:
        """Why ``offer`` does not fit ("" when it does): the first requirement it misses."""
        for check in self.checks:
            why = check.reason(offer)
            if why:
                return why
        return ""

    def reasons(self, offer: Offer) -> list[str]:
        """Every requirement ``offer`` misses (for naming the closest offer)."""
        return [why for check in self.checks if (why := check.reason(offer))]

    def apply(self, offers: Sequence[Offer]) -> tuple[list[Offer], list[tuple[str, int]]]:
        """Survivors, and how many were left after each check (for empty-result messages)."""
        counts: list[tuple[str, int]] = []
        current = list(offers)
        for check in self.checks:
            current = [o for o in current if not check.reason(o)]
            counts.append((check.label, len(current)))
            if not current:
                break
        return current, counts


def from_resources(
    res: Resources,
    *,
    needs_gpu: bool = False,
    provider_regions: Mapping[str, Sequence[str]] | None = None,
) -> Requirements:
    """A job's ``resources:`` block. ``needs_gpu``: the job has a workload to size, so an
    omitted ``gpu:`` still means "some GPU"; without one it accepts any machine."""
    g = res.gpu
    asked = g != GpuRequest()
    spot = str(res.spot).lower()
    return Requirements(
        gpu=g,
        gpu_text=_gpu_text(g),
        gpu_required=not g.cpu_only and (asked or needs_gpu),
        cpus=Amount(res.cpus, True) if res.cpus is not None else None,
        memory_gb=Amount(res.memory_gb, True) if res.memory_gb is not None else None,
        nvme_gb=res.local_nvme_gb,
        market={"true": "spot", "false": "on_demand"}.get(spot),
        providers=tuple(res.providers),
        regions=tuple(res.regions),
        max_price=res.max_price,
        provider_regions=normalize_provider_regions(provider_regions),
    )


def normalize_provider_regions(
    table: Mapping[str, Sequence[str]] | None,
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((name, tuple(globs)) for name, globs in (table or {}).items() if globs))


def _gpu_text(g: GpuRequest) -> str:
    if g.cpu_only:
        return "none"
    head = g.name or ("any" if g.any_gpu else f"{g.min_memory_gb:g}GB+" if g.min_memory_gb else "")
    if g.count is not None:
        head += f":{g.count}{'+' if g.count_at_least else ''}"
    return head


# -- compiling ----------------------------------------------------------------------------


def _label(req: Requirements, flag: str, key: str, value: object) -> str:
    return f"{flag} {value}" if req.labels == "flags" else f"resources.{key}: {value}"


def _checks(req: Requirements, registry: GpuRegistry) -> list[Check]:
    """The GPU first (the most selective requirement, so the later checks see few
    offers, and an empty result blames the narrower filter), then the rest of the
    machine's shape, the market, the place and the price; the same order everywhere."""
    return [
        _free_tier_check(req),
        *_gpu_checks(req, registry),
        *_shape_checks(req),
        *_market_check(req),
        *_place_checks(req),
    ]


def _free_tier_check(req: Requirements) -> Check:
    named = frozenset(req.providers)
    if req.free_only:
        return Check("--free", lambda o: "" if FLAG_FREE_TIER in o.flags else "not a free tier")
    label = "paid offers (add --free)" if req.labels == "flags" else "resources.providers"
    return Check(
        label,
        lambda o: (
            f"free tier: list {o.provider} in resources.providers to use it"
            if FLAG_FREE_TIER in o.flags and o.provider not in named
            else ""
        ),
    )


def _place_checks(req: Requirements) -> list[Check]:
    out: list[Check] = []
    if req.providers:
        wanted = frozenset(req.providers)
        listed = ", ".join(sorted(wanted))
        out.append(
            Check(
                _label(req, "--provider", "providers", ",".join(req.providers)),
                lambda o: (
                    "" if o.provider in wanted else f"provider not in {listed} ({o.provider})"
                ),
            )
        )
    for name, globs in req.provider_regions:
        out.append(_configured_regions(name, globs))
    if req.regions:
        ok = region_matcher(req.regions)
        listed_r = ", ".join(req.regions)
        out.append(
            Check(
                _label(req, "--region", "regions", ",".join(req.regions)),
                lambda o: "" if ok(o) else f"region not in {listed_r} ({o.region})",
            )
        )
    if req.max_price is not None:
        cap = req.max_price
        out.append(
            Check(
                _label(req, "--max-price", "max_price", f"{cap:g}"),
                lambda o: (
                    ""
                    if o.price_per_hour <= cap
                    else f"price > max_price ${cap:g}/h (${o.price_per_hour:.2f}/h)"
                ),
            )
        )
    return out


def _configured_regions(name: str, globs: tuple[str, ...]) -> Check:
    ok = region_matcher(globs)
    listed = ", ".join(globs)
    return Check(
        f"providers.{name}.regions in config.toml",
        lambda o: (
            ""
            if o.provider != name or ok(o)
            else f"region not in providers.{name}.regions {listed} ({o.region})"
        ),
    )


def region_matcher(globs: Iterable[str]) -> Callable[[Offer], bool]:
    """Case-insensitive globs against an offer's region or zone (memoized per place)."""
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


def _market_check(req: Requirements) -> list[Check]:
    if req.market is None:
        return []
    spot = req.market == "spot"
    if req.labels == "flags":
        label, why = ("--spot", "not spot") if spot else ("--on-demand", "spot")
    else:
        label = f"resources.spot: {'true' if spot else 'false'}"
        why = "on-demand; job wants spot" if spot else "spot; job wants on-demand"
    return [Check(label, lambda o: "" if (o.market == "spot") == spot else why)]


def _gpu_checks(req: Requirements, registry: GpuRegistry) -> list[Check]:
    g = req.gpu
    label = _label(req, "--gpu", "gpu", req.gpu_text)
    if g.cpu_only:
        return [
            Check(
                label,
                lambda o: f"CPU-only job; offer has GPUs ({o.gpu_count})" if o.gpu_count else "",
            )
        ]
    out: list[Check] = []
    if req.gpu_required:
        out.append(Check(label, lambda o: "" if o.gpu_count > 0 else "no GPU"))
    if g.name and not g.any_gpu:
        names = registry.matches(g.name)
        out.append(Check(label, lambda o: "" if o.gpu in names else f"GPU not {g.name} ({o.gpu})"))
    elif not req.accelerators and (req.gpu_required or req.labels == "flags"):
        out.append(_not_accelerator(registry, req))
    count = _gpu_count(req)
    if count is not None:
        count_label = label
        if req.labels == "flags":  # name the flag the count came from
            count_label = f"{label} (count)" if g.count is not None else f"--gpus {count}"
        out.append(
            Check(
                count_label,
                lambda o: "" if count.ok(o.gpu_count) else f"GPU count not {count} ({o.gpu_count})",
            )
        )
    floor = max(g.min_memory_gb or 0.0, req.min_gpu_memory_gb or 0.0)
    if floor:
        flag = "--min-gpu-memory" if req.min_gpu_memory_gb else "--gpu"
        out.append(
            Check(
                _label(req, flag, "gpu", f"{floor:g}GB"),
                lambda o: (
                    ""
                    if o.gpu_memory_gb >= floor - _EPS
                    else f"GPU memory < {floor:g} GB ({o.gpu_memory_gb:g})"
                ),
            )
        )
    return out


def _gpu_count(req: Requirements) -> Amount | None:
    g = req.gpu
    if g.count is not None:
        return Amount(float(g.count), g.count_at_least)
    return req.gpus


def _not_accelerator(registry: GpuRegistry, req: Requirements) -> Check:
    kinds: dict[str, bool] = {}

    def check(o: Offer) -> str:
        ok = kinds.get(o.gpu)
        if ok is None:
            spec = registry.spec(o.gpu) if o.gpu else None
            ok = kinds[o.gpu] = spec is None or spec.is_gpu
        return "" if ok else f"not a GPU: an accelerator ({o.gpu})"

    label = "GPUs only (add --all-accelerators)" if req.labels == "flags" else "resources.gpu"
    return Check(label, check)


def _amount_check(
    req: Requirements, amount: Amount, flag: str, key: str, what: str, attr: str
) -> Check:
    # A job's floors read "vCPUs < 16 (8)"; an exact flag reads "vCPUs not 16 (8)".
    op = "<" if amount.at_least else "not"
    value = f"{amount.value:g}"

    def reason(o: Offer) -> str:
        have = float(getattr(o, attr))
        return "" if amount.ok(have) else f"{what} {op} {value} ({have:g})"

    return Check(_label(req, flag, key, amount), reason)


def _shape_checks(req: Requirements) -> list[Check]:
    out: list[Check] = []
    if req.gpus is not None and req.gpu.count is not None:
        gpus = req.gpus  # both given (offers --gpu X:8 --gpus 8+): both must hold
        out.append(
            Check(
                _label(req, "--gpus", "gpu", gpus),
                lambda o: "" if gpus.ok(o.gpu_count) else f"GPU count not {gpus} ({o.gpu_count})",
            )
        )
    if req.cpus is not None:
        out.append(_amount_check(req, req.cpus, "--cpus", "cpus", "vCPUs", "vcpus"))
    if req.memory_gb is not None:
        out.append(_amount_check(req, req.memory_gb, "--memory", "memory", "RAM GB", "memory_gb"))
    if req.nvme_gb:
        nvme = req.nvme_gb
        out.append(
            Check(
                _label(req, "--nvme", "local_nvme", f"{nvme:g}GB"),
                lambda o: (
                    "" if o.nvme_gb >= nvme - _EPS else f"local NVMe GB < {nvme:g} ({o.nvme_gb:g})"
                ),
            )
        )
    return out
