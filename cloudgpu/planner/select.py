"""Which offers meet a job's ``resources:`` block, and for those that don't, which
requirement they miss: one short reason per offer, "what (this offer's value)", so the
text before " (" groups offers that miss the same requirement.

Pure filtering over offers handed in; it must not size workloads or rank anything.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.spec.model import GpuRequest, Resources

# Catalog memory figures are snapped to the nearest known size (REFERENCE.md s1: within
# ~7%), so a memory floor forgives a few percent.
MEMORY_TOLERANCE = 0.97

Check = Callable[[Offer], str]


@dataclass(frozen=True)
class Requirements:
    """The resources block compiled into checks; ``reason(offer)`` is "" when it passes."""

    checks: tuple[Check, ...]

    def reason(self, offer: Offer) -> str:
        for check in self.checks:
            why = check(offer)
            if why:
                return why
        return ""


def _gpu_checks(res: Resources, registry: GpuRegistry, needs_gpu: bool) -> list[Check]:
    req = res.gpu
    if req.cpu_only:
        return [lambda o: f"CPU-only job; offer has GPUs ({o.gpu_count})" if o.gpu_count else ""]
    if req == GpuRequest() and not needs_gpu:
        return []  # `gpu:` omitted and nothing to size: any machine will do
    checks: list[Check] = [lambda o: "" if o.gpu_count > 0 else "no GPU"]
    if req.name and not req.any_gpu:
        names = registry.matches(req.name)
        checks.append(lambda o: "" if o.gpu in names else f"GPU not {req.name} ({o.gpu})")
    else:
        checks.append(_not_accelerator(registry))
    if req.count is not None:
        count = req.count
        checks.append(
            lambda o: "" if o.gpu_count == count else f"GPU count not {count} ({o.gpu_count})"
        )
    if req.min_memory_gb is not None:
        floor = req.min_memory_gb
        checks.append(
            lambda o: (
                ""
                if o.gpu_memory_gb >= floor * MEMORY_TOLERANCE
                else f"GPU memory < {floor:g} GB ({o.gpu_memory_gb:g})"
            )
        )
    return checks


def _not_accelerator(registry: GpuRegistry) -> Check:
    """Without a named GPU, "a GPU" means a CUDA/ROCm GPU, not an ASIC such as Inferentia
    (those run only their vendor's SDK); a GPU the registry does not know is kept."""
    kinds: dict[str, bool] = {}

    def check(o: Offer) -> str:
        ok = kinds.get(o.gpu)
        if ok is None:
            spec = registry.spec(o.gpu)
            ok = kinds[o.gpu] = spec is None or spec.is_gpu
        return "" if ok else f"not a GPU: an accelerator ({o.gpu})"

    return check


def _floor(value: float | None, attr: Callable[[Offer], float], what: str) -> list[Check]:
    if value is None:
        return []
    return [lambda o: "" if attr(o) >= value else f"{what} < {value:g} ({attr(o):g})"]


def _market_checks(res: Resources) -> list[Check]:
    spot = str(res.spot).lower()
    if spot == "true":
        return [lambda o: "" if o.market == "spot" else "on-demand; job wants spot"]
    if spot == "false":
        return [lambda o: "" if o.market != "spot" else "spot; job wants on-demand"]
    return []


def _place_checks(res: Resources) -> list[Check]:
    checks: list[Check] = []
    if res.providers:
        wanted = frozenset(res.providers)
        listed = ", ".join(sorted(wanted))
        checks.append(
            lambda o: "" if o.provider in wanted else f"provider not in {listed} ({o.provider})"
        )
    if res.regions:
        pats = tuple(res.regions)
        checks.append(
            lambda o: (
                ""
                if any(fnmatch.fnmatchcase(o.region, p) for p in pats)
                else f"region not in {', '.join(pats)} ({o.region})"
            )
        )
    if res.max_price is not None:
        cap = res.max_price
        checks.append(
            lambda o: (
                ""
                if o.price_per_hour <= cap
                else f"price > max_price ${cap:g}/h (${o.price_per_hour:.2f}/h)"
            )
        )
    return checks


def _free_tier_check(res: Resources) -> Check:
    """A free tier (Kaggle, Colab) runs under quotas and session limits the user must
    accept: it is chosen only when the job names its provider."""
    named = set(res.providers)
    return lambda o: (
        f"free tier: list {o.provider} in resources.providers to use it"
        if FLAG_FREE_TIER in o.flags and o.provider not in named
        else ""
    )


def compile_requirements(
    res: Resources, registry: GpuRegistry, *, needs_gpu: bool = False
) -> Requirements:
    """Checks in the order a user reads them: place and price first, then shape.

    ``needs_gpu``: the job has a workload to size, so an omitted ``gpu:`` still means
    "some GPU"; without one an omitted ``gpu:`` accepts any machine (as the lifecycle's
    fallback ranking does)."""
    checks = [
        _free_tier_check(res),
        *_place_checks(res),
        *_market_checks(res),
        *_gpu_checks(res, registry, needs_gpu),
        *_floor(res.cpus, lambda o: o.vcpus, "vCPUs"),
        *_floor(res.memory_gb, lambda o: o.memory_gb, "RAM GB"),
        *_floor(res.local_nvme_gb, lambda o: o.nvme_gb, "local NVMe GB"),
    ]
    return Requirements(tuple(checks))
