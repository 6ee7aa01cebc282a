"""What every per-provider converter shares: the emit step that turns one priced row
into on-demand and spot Offers, handling the published quirks on purpose.

Quirks handled here, for every provider:
* an empty price means "not offered / not published": no offer, counted in ``skipped``;
* a spot price above the on-demand price is kept (it is what was published) and the
  spot offer is flagged FLAG_SPOT_ABOVE_ON_DEMAND so no one mistakes it for a saving;
* a GPU name the registry does not know is kept verbatim and flagged FLAG_UNKNOWN_GPU;
* reported GPU memory within 8% of the spec's (GiB vs GB, driver reservations: AWS says
  22888 MiB for a 24 GB L4) is snapped to the spec's figure.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_SPOT_ABOVE_ON_DEMAND, FLAG_UNKNOWN_GPU, Offer

EXTRACTED = "2026-12-01"
OBSERVED_AT = "2026-12-01T00:00:00Z"  # extraction date: the table's only dated reference
REPO = "skypilot-org/skypilot-catalog"


@dataclass
class Context:
    provider: str
    registry: GpuRegistry
    price_source: str
    offers: list[Offer] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    unknown_gpus: Counter[str] = field(default_factory=Counter)  # kept, flagged
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Row:
    """One priced machine shape at one place, before it becomes offers."""

    instance_type: str
    region: str
    zone: str
    gpu_raw: str
    gpu_count: int
    gpu_memory_gb: float | None  # per GPU as reported, None = unknown
    vcpus: float
    memory_gb: float
    price: str  # text as published ("" = none)
    spot: str
    nvme_count: int = 0
    nvme_size_gb: float = 0.0
    network_gbps: float = 0.0
    flags: tuple[str, ...] = ()  # on both markets
    on_demand_flags: tuple[str, ...] = ()  # e.g. FLAG_PRICE_PREDATES_CUT (a list-price cut)
    gpu_hint: str | None = None  # canonical name decided by the caller (e.g. from size)


def read_rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        yield from csv.DictReader(fh)


def mib_to_gb(mib: float) -> float:
    return round(mib / 1024.0, 2)


def resolve_gpu(ctx: Context, row: Row) -> tuple[str, float, tuple[str, ...]]:
    """Canonical name, per-GPU memory and flags for a row's GPU."""
    name = row.gpu_hint or ctx.registry.canonical(row.gpu_raw, row.gpu_memory_gb)
    spec = ctx.registry.spec(name) if name else None
    if spec is None:
        ctx.unknown_gpus[row.gpu_raw] += 1
        return row.gpu_raw or "unknown", row.gpu_memory_gb or 0.0, (FLAG_UNKNOWN_GPU,)
    mem = row.gpu_memory_gb
    if mem is None or abs(mem - spec.memory_gb) <= 0.08 * spec.memory_gb:
        mem = spec.memory_gb
    return spec.name, mem, ()


def _price(text: str) -> float | None:
    text = text.strip()
    return float(text) if text else None


def emit(ctx: Context, row: Row, *, spot_allowed: bool = True) -> None:
    """Append the row's on-demand and spot offers; count what is skipped and why."""
    gpu, mem, gpu_flags = resolve_gpu(ctx, row)
    price, spot = _price(row.price), _price(row.spot)
    base = dict(
        provider=ctx.provider, instance_type=row.instance_type, region=row.region,
        zone=row.zone, gpu=gpu, gpu_count=row.gpu_count, gpu_memory_gb=mem,
        vcpus=row.vcpus, memory_gb=row.memory_gb, nvme_count=row.nvme_count,
        nvme_size_gb=row.nvme_size_gb, network_gbps=row.network_gbps,
        price_source=ctx.price_source, observed_at=OBSERVED_AT,
    )  # fmt: skip
    flags = row.flags + gpu_flags
    if price is None or price <= 0:
        ctx.skipped["on_demand: empty price in table"] += 1
    else:
        od_flags = flags + row.on_demand_flags
        ctx.offers.append(Offer(market="on_demand", price_per_hour=price, flags=od_flags, **base))  # type: ignore[arg-type]
    if not spot_allowed:
        return
    if spot is None or spot <= 0:
        ctx.skipped["spot: empty or zero price in table"] += 1
        return
    spot_flags = flags
    if price is not None and spot > price:
        spot_flags += (FLAG_SPOT_ABOVE_ON_DEMAND,)
    ctx.offers.append(Offer(market="spot", price_per_hour=spot, flags=spot_flags, **base))  # type: ignore[arg-type]
