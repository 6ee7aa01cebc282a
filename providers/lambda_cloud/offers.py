"""Lambda's live offers from ``GET /instance-types``.

Each entry is ``{"instance_type": {name, description, gpu_description,
price_cents_per_hour, specs: {vcpus, memory_gib, storage_gib, gpus}},
"regions_with_capacity_available": [{name, description}]}``
(https://docs-api.lambda.ai/api/cloud#listInstanceTypes). Prices are US cents per
instance-hour. An offer is made per region that has capacity now: a type sold out
everywhere gives no live offer (the bundled snapshot still lists it for comparison).

Lambda has no spot market, so every offer is on-demand. Its instances boot from a local
NVMe root disk (``storage_gib``); there is no separate empty NVMe device, so offers carry
``nvme_count`` 0 like the bundled snapshot, and the size travels in ``extra``. This
module must not invent a price: an entry without a positive price gives no offer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer

SOURCE = "lambda:instance-types"
_GPU_DESC = re.compile(r"^\s*(?P<base>.+?)\s*\(\s*(?P<mem>\d+(?:\.\d+)?)\s*GB\s*(?P<form>[^)]*)\)")
_TYPE_NAME = re.compile(r"^gpu_(?P<count>\d+)x_(?P<rest>.+)$")


def gpu_of(type_name: str, gpu_description: str, registry: GpuRegistry) -> tuple[str, float, bool]:
    """(canonical or raw GPU name, memory GB per GPU, known) for one instance type.

    ``gpu_description`` reads like ``H100 (80 GB SXM5)`` or ``A100 (40 GB PCIe)``: the
    memory tells A100 40 GB from 80 GB, the form factor SXM from PCIe.
    """
    m = _GPU_DESC.match(gpu_description or "")
    base = m.group("base") if m else (gpu_description or "").strip()
    memory = float(m.group("mem")) if m else 0.0
    form = m.group("form").strip() if m else ""
    typed = _TYPE_NAME.match(type_name)
    rest = typed.group("rest") if typed else type_name
    candidates = [
        f"{base}-{memory:g}GB-{form}" if form else "",
        f"{base} {form}" if form else "",
        f"{base}-{memory:g}GB",
        base,
        rest,
        rest.split("_")[0],
    ]
    for raw in candidates:
        canon = registry.canonical(raw, memory or None) if raw else None
        if canon:
            spec = registry.spec(canon)
            return canon, memory or (spec.memory_gb if spec else 0.0), True
    return gpu_description or type_name, memory, False


def offers_from_instance_types(
    data: Mapping[str, Any], registry: GpuRegistry, *, observed_at: str
) -> list[Offer]:
    out: list[Offer] = []
    for key, entry in sorted(data.items()):
        it = entry.get("instance_type") or {}
        specs = it.get("specs") or {}
        name = str(it.get("name") or key)
        count = int(specs.get("gpus") or 0)
        cents = float(it.get("price_cents_per_hour") or 0)
        if count <= 0 or cents <= 0:
            continue  # CPU-only types and unpriced entries: nothing to offer
        gpu, memory, known = gpu_of(name, str(it.get("gpu_description") or ""), registry)
        if memory <= 0:
            continue  # a GPU offer without its memory would break every derived column
        for region in entry.get("regions_with_capacity_available") or []:
            out.append(
                Offer(
                    provider="lambda",
                    instance_type=name,
                    region=str(region.get("name")),
                    zone="",
                    market="on_demand",
                    gpu=gpu,
                    gpu_count=count,
                    gpu_memory_gb=memory,
                    vcpus=float(specs.get("vcpus") or 0),
                    memory_gb=float(specs.get("memory_gib") or 0),
                    price_per_hour=round(cents / 100.0, 6),
                    price_source=SOURCE,
                    observed_at=observed_at,
                    flags=() if known else (FLAG_UNKNOWN_GPU,),
                    extra={
                        "storage_gib": specs.get("storage_gib"),
                        "description": it.get("description"),
                    },
                )
            )
    return out
