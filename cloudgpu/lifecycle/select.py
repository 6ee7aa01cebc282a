"""Which offers can run a job, cheapest first, and why the others cannot.

A plain resource filter ranked by hourly price: the lifecycle's fallback when the
planner (cloudgpu.planner, which ranks by total estimated cost) is not usable. Kept to
one entry point, :func:`rank`, so the two are interchangeable. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.errors import ConfigError
from cloudgpu.spec.model import GpuRequest, JobSpec, Resources


@dataclass(frozen=True)
class Ranking:
    fits: list[Offer]  # cheapest first
    rejected: list[tuple[Offer, list[str]]] = field(default_factory=list)  # offer, reasons
    estimates: dict[str, str] = field(default_factory=dict)  # offer key -> "est 8.7 h, $51"


def rank(job: JobSpec, offers: Sequence[Offer], gpus: GpuRegistry) -> Ranking:
    """Offers that satisfy ``job.resources``, cheapest first (ties: more GPU memory)."""
    wanted = _gpu_names(job.resources, gpus)
    fits: list[Offer] = []
    rejected: list[tuple[Offer, list[str]]] = []
    for offer in offers:
        reasons = shortfalls(job.resources, offer, wanted)
        if reasons:
            rejected.append((offer, reasons))
        else:
            fits.append(offer)
    fits.sort(key=lambda o: (o.price_per_hour, -o.total_gpu_memory_gb, o.key))
    return Ranking(fits, rejected)


def _gpu_names(res: Resources, gpus: GpuRegistry) -> frozenset[str] | None:
    name = res.gpu.name
    return gpus.matches(name) if name else None


def shortfalls(res: Resources, o: Offer, wanted: frozenset[str] | None) -> list[str]:
    """Why ``o`` does not fit; empty when it does."""
    out: list[str] = []
    if FLAG_FREE_TIER in o.flags and o.provider not in res.providers:
        out.append(f"free tier: list {o.provider} in resources.providers to use it")
    if res.providers and o.provider not in res.providers:
        out.append(f"provider {o.provider} not in {', '.join(res.providers)}")
    if res.regions and not any(fnmatch.fnmatch(o.region, r) for r in res.regions):
        out.append(f"region {o.region} not in {', '.join(res.regions)}")
    if (res.spot == "true" and o.market != "spot") or (res.spot == "false" and o.market == "spot"):
        out.append(f"market {o.market} (spot: {res.spot})")
    out += _gpu_shortfalls(res, o, wanted)
    if res.cpus and o.vcpus < res.cpus:
        out.append(f"{o.vcpus:g} vCPUs < {res.cpus:g}")
    if res.memory_gb and o.memory_gb < res.memory_gb:
        out.append(f"{o.memory_gb:g} GB RAM < {res.memory_gb:g} GB")
    if res.local_nvme_gb and o.nvme_gb < res.local_nvme_gb:
        out.append(f"{o.nvme_gb:g} GB local NVMe < {res.local_nvme_gb:g} GB")
    if res.max_price is not None and o.price_per_hour > res.max_price:
        out.append(f"${o.price_per_hour:.2f}/h > max_price ${res.max_price:.2f}/h")
    return out


def _gpu_shortfalls(res: Resources, o: Offer, wanted: frozenset[str] | None) -> list[str]:
    g = res.gpu
    if g.cpu_only or g == GpuRequest():  # `gpu:` omitted: the job needs no GPU
        return []
    if o.gpu_count == 0:
        return ["no GPU"]
    out = []
    if wanted is not None and o.gpu not in wanted and o.gpu.lower() != (g.name or "").lower():
        out.append(f"GPU {o.gpu}, not {g.name}")
    if g.min_memory_gb and o.gpu_memory_gb < g.min_memory_gb:
        out.append(f"{o.gpu_memory_gb:g} GB per GPU < {g.min_memory_gb:g} GB")
    if g.count and o.gpu_count != g.count:
        out.append(f"{o.gpu_count} GPUs, not {g.count}")
    return out


def describe_offer(o: Offer) -> str:
    gpu = f"{o.gpu}:{o.gpu_count}" if o.gpu_count else "no GPU"
    where = f"{o.region}/{o.zone}" if o.zone else o.region
    return (
        f"{o.provider} {o.instance_type} ({where}, {o.market}; {gpu}, {o.vcpus:g} vCPU, "
        f"{o.memory_gb:g} GB) ${o.price_per_hour:.2f}/h"
    )


def nothing_fits(job: JobSpec, ranking: Ranking) -> ConfigError:
    """The error for an impossible job, naming the closest offer and what it lacks."""
    if not ranking.rejected:
        return ConfigError(
            f"{job.source or job.name}: no offers to choose from",
            hint="enable a provider (`cloudgpu check`) or remove resources.providers",
        )
    offer, reasons = min(ranking.rejected, key=lambda r: (len(r[1]), r[0].price_per_hour))
    return ConfigError(
        f"{job.source or job.name}: no offer fits resources ({len(ranking.rejected)} "
        f"considered); closest is {describe_offer(offer)}: {'; '.join(reasons)}",
        hint="relax resources in the job file, or enable more providers (`cloudgpu check`)",
    )
