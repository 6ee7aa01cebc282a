"""Live AWS offers: instance shapes and zones from EC2, prices from EC2 spot history and
the Price List API, combined into normalized Offers.

Sources, per region: ``describe_instance_types`` (GpuInfo, InstanceStorageInfo for local
NVMe, NetworkInfo), ``describe_instance_type_offerings`` per availability zone,
``describe_spot_price_history`` per zone (latest row wins) and pricing.on_demand_prices.
An on-demand offer is made only where AWS published a price; an instance type is offered
only in the zones AWS lists for it. This module never caches (the CLI does) and never
writes anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cloudgpu_providers.aws.faults import Caller
from cloudgpu_providers.aws.pricing import on_demand_prices

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_SPOT_ABOVE_ON_DEMAND, FLAG_UNKNOWN_GPU, Offer

PRICE_SOURCE = "aws:api"
SPOT_PRODUCT = "Linux/UNIX"
_CHUNK = 50  # instance types per spot-history request
# Every EC2 instance family with NVIDIA/AMD GPUs is named g* or p* (accelerated
# computing); filtering by name server-side saves paging through ~900 other types.
# GpuInfo is still what decides: a type without it is skipped.
GPU_FAMILIES = ["g*", "p*"]


@dataclass(frozen=True)
class TypeInfo:
    """One GPU instance type, as describe_instance_types reports it."""

    name: str
    gpu_raw: str
    gpu_count: int
    gpu_memory_gb: float  # per GPU
    vcpus: int
    memory_gb: float
    nvme_count: int
    nvme_size_gb: float
    network_gbps: float
    architectures: tuple[str, ...]


def network_gbps(info: dict[str, Any]) -> float:
    """Instance bandwidth from NetworkInfo: the NetworkPerformance label ("3200 Gigabit",
    "Up to 25 Gigabit", "4x 100 Gigabit"), the instance's documented figure; the sum of
    the cards' peaks only without a readable label (g6e.48xlarge lists four cards of 400
    under a "400 Gigabit" label: the cards are not additive). The bundled snapshot's
    converter (tools/convert/aws.py) reads the same data through this function."""
    label = str(info.get("NetworkPerformance", ""))
    m = re.search(r"(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*(Gigabit|Megabit)", label)
    if m:
        value = float(m.group(2)) * (int(m.group(1)) if m.group(1) else 1)
        return value if m.group(3) == "Gigabit" else value / 1000.0
    cards = info.get("NetworkCards") or []
    return sum(float(c.get("PeakBandwidthInGbps") or 0) for c in cards)


def parse_type(item: dict[str, Any]) -> TypeInfo | None:
    """A TypeInfo for a GPU instance type, None for anything without GPUs."""
    gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return None
    gpu = gpus[0]
    count = sum(int(g.get("Count", 0)) for g in gpus)
    if count < 1:
        return None  # fractional GPU shares (e.g. g6f): not a whole-GPU offer
    storage = item.get("InstanceStorageInfo") or {}
    disks = [d for d in storage.get("Disks", []) if d.get("Type") == "ssd"]
    nvme = storage.get("NvmeSupport", "unsupported") != "unsupported" and bool(disks)
    return TypeInfo(
        name=item["InstanceType"],
        gpu_raw=str(gpu.get("Name", "")),
        gpu_count=count,
        gpu_memory_gb=round(gpu.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024.0, 2),
        vcpus=int(item.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
        memory_gb=round(item.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024.0, 2),
        nvme_count=sum(int(d.get("Count", 0)) for d in disks) if nvme else 0,
        nvme_size_gb=float(disks[0].get("SizeInGB", 0)) if nvme else 0.0,
        network_gbps=network_gbps(item.get("NetworkInfo") or {}),
        architectures=tuple(item.get("ProcessorInfo", {}).get("SupportedArchitectures", [])),
    )


def gpu_types(call: Caller, ec2: Any) -> dict[str, TypeInfo]:
    """Every GPU instance type the region's EC2 describes."""
    out: dict[str, TypeInfo] = {}
    for page in call.pages(
        "ec2 describe_instance_types",
        ec2.describe_instance_types,
        "NextToken",
        Filters=[{"Name": "instance-type", "Values": GPU_FAMILIES}],
        MaxResults=100,
    ):
        for item in page.get("InstanceTypes", []):
            info = parse_type(item)
            if info is not None:
                out[info.name] = info
    return out


def zones_by_type(call: Caller, ec2: Any, wanted: set[str]) -> dict[str, list[str]]:
    """{instance type: [availability zones offering it]} for the wanted types."""
    out: dict[str, list[str]] = {}
    for page in call.pages(
        "ec2 describe_instance_type_offerings",
        ec2.describe_instance_type_offerings,
        "NextToken",
        LocationType="availability-zone",
        MaxResults=1000,
    ):
        for row in page.get("InstanceTypeOfferings", []):
            if row.get("InstanceType") in wanted:
                out.setdefault(row["InstanceType"], []).append(row["Location"])
    return {k: sorted(set(v)) for k, v in out.items()}


def zone_ids(call: Caller, ec2: Any) -> dict[str, str]:
    """{zone name: zone ID}. Offers carry IDs ("use1-az2"), as the bundled catalog
    does: names are shuffled per account, IDs are the same physical zone everywhere."""
    out = call("describe_availability_zones", ec2.describe_availability_zones)
    return {z["ZoneName"]: z["ZoneId"] for z in out.get("AvailabilityZones", []) if "ZoneId" in z}


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def spot_prices(
    call: Caller, ec2: Any, types: Iterable[str], now: Any
) -> dict[tuple[str, str], float]:
    """{(instance type, zone): current Linux spot price}; the newest row per pair wins."""
    latest: dict[tuple[str, str], tuple[Any, float]] = {}
    for chunk in _chunks(sorted(types), _CHUNK):
        pages = call.pages(
            "ec2 describe_spot_price_history",
            ec2.describe_spot_price_history,
            "NextToken",
            InstanceTypes=chunk,
            ProductDescriptions=[SPOT_PRODUCT],
            StartTime=now,
        )
        for page in pages:
            for row in page.get("SpotPriceHistory", []):
                key = (row["InstanceType"], row["AvailabilityZone"])
                price, stamp = float(row["SpotPrice"]), row.get("Timestamp")
                if price > 0 and (key not in latest or stamp > latest[key][0]):
                    latest[key] = (stamp, price)
    return {k: v[1] for k, v in latest.items()}


def _offer(
    t: TypeInfo,
    region: str,
    gpu: str,
    gpu_mem: float,
    zone: str,
    market: str,
    price: float,
    flags: tuple[str, ...],
    observed_at: str,
) -> Offer:
    return Offer(
        provider="aws",
        instance_type=t.name,
        region=region,
        zone=zone,
        market=market,
        gpu=gpu,
        gpu_count=t.gpu_count,
        gpu_memory_gb=gpu_mem,
        vcpus=float(t.vcpus),
        memory_gb=t.memory_gb,
        price_per_hour=price,
        nvme_count=t.nvme_count,
        nvme_size_gb=t.nvme_size_gb,
        network_gbps=t.network_gbps,
        price_source=PRICE_SOURCE,
        observed_at=observed_at,
        flags=flags,
    )


def build_offers(
    region: str,
    types: dict[str, TypeInfo],
    zones: dict[str, list[str]],
    on_demand: dict[str, float],
    spot: dict[tuple[str, str], float],
    gpus: GpuRegistry,
    observed_at: str,
    ids: dict[str, str] | None = None,
) -> list[Offer]:
    """Offers per (type, zone, market) from what the APIs returned.

    A GPU name the registry cannot map is kept as AWS spells it and flagged; a spot
    price above on-demand is kept (it is what AWS charges) and flagged.
    """
    offers: list[Offer] = []
    for name, t in sorted(types.items()):
        canonical = gpus.canonical(t.gpu_raw, t.gpu_memory_gb)
        spec = gpus.spec(canonical) if canonical else None
        gpu = spec.name if spec else t.gpu_raw
        mem = t.gpu_memory_gb
        # Reported memory within 8% of the spec's (MiB vs GB, driver reservations: 22888
        # MiB for a 24 GB A10G) is the spec's figure, as in the bundled snapshot.
        if spec is not None and abs(mem - spec.memory_gb) <= 0.08 * spec.memory_gb:
            mem = spec.memory_gb
        base: tuple[str, ...] = () if spec else (FLAG_UNKNOWN_GPU,)
        od = on_demand.get(name)
        for zone in zones.get(name, []):
            zid = (ids or {}).get(zone, zone)
            if od is not None:
                offers.append(_offer(t, region, gpu, mem, zid, "on_demand", od, base, observed_at))
            sp = spot.get((name, zone))
            if sp is not None:
                flags = base + ((FLAG_SPOT_ABOVE_ON_DEMAND,) if od and sp > od else ())
                offers.append(_offer(t, region, gpu, mem, zid, "spot", sp, flags, observed_at))
    return offers


def fetch_region(
    call: Caller, ec2: Any, pricing: Any, region: str, gpus: GpuRegistry, now: Any
) -> list[Offer]:
    """All GPU offers of one region."""
    types = gpu_types(call, ec2)
    if not types:
        return []
    zones = zones_by_type(call, ec2, set(types))
    offered = {t for t in types if t in zones}
    spot = spot_prices(call, ec2, offered, now)
    on_demand = on_demand_prices(call, pricing, region, offered)
    ids = zone_ids(call, ec2)
    return build_offers(region, types, zones, on_demand, spot, gpus, now.isoformat(), ids)
