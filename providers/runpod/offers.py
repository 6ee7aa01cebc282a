"""RunPod's live offers from the GraphQL ``gpuTypes`` query.

RunPod prices per GPU per hour (``securePrice`` for Secure Cloud, ``communityPrice`` for
Community Cloud) and places a pod in any data center with stock, so a live offer has the
region "global" and no zone. A pod of N GPUs costs N times the per-GPU price. RunPod
does not publish vCPUs and RAM per GPU type; an offer's ``vcpus`` and ``memory_gb`` are
the minimums create() asks for (``minVcpuCount`` / ``minMemoryInGb``), configurable.

Spot: REFERENCE.md section 7 says spot (interruptible) pods are being retired in 2026, so
no spot offer is produced even where the API still returns spot prices. This module
must not invent a price: a GPU type without a price in a cloud type gives no offer there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cloudgpu.catalog.gpus import GpuRegistry, compact
from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer

GPU_COUNTS = (1, 2, 4, 8)
CLOUD_TYPES = (
    ("SECURE", "securePrice", "secureCloud"),
    ("COMMUNITY", "communityPrice", "communityCloud"),
)
LIVE_REGION = "global"
SOURCE = "runpod:graphql-gpuTypes"


# RunPod's own spellings of cards other providers name differently: its plain
# "A100-80GB" and "H100" are the PCIe cards (it names the SXM ones "...-SXM"), read from
# its GPU types list (displayName "A100 PCIe" / "H100 PCIe") and its pricing page.
_RUNPOD_NAMES = {"A10080GB": "A100-80GB-PCIe", "H100": "H100-PCIe"}


def runpod_gpu(raw: str, memory_gb: float | None, registry: GpuRegistry) -> str | None:
    """The canonical GPU of a RunPod name (its GPU type id, display name or the bundled
    table's AcceleratorName), None when unknown."""
    mapped = _RUNPOD_NAMES.get(compact(raw))
    if mapped is not None and not (mapped == "H100-PCIe" and (memory_gb or 0) >= 90):
        return mapped
    return registry.canonical(raw, memory_gb)


def instance_type_name(count: int, gpu: str, cloud_type: str) -> str:
    """Same shape as the bundled snapshot's names, e.g. ``1x_A100-80GB-SXM_SECURE``."""
    return f"{count}x_{gpu}_{cloud_type}"


def offers_from_gpu_types(
    gpu_types: Iterable[Mapping[str, Any]],
    registry: GpuRegistry,
    *,
    observed_at: str,
    vcpus_per_gpu: float,
    memory_gb_per_gpu: float,
) -> list[Offer]:
    out: list[Offer] = []
    for gt in gpu_types:
        memory = float(gt.get("memoryInGb") or 0)
        raw = str(gt.get("id") or "")
        if not raw or memory <= 0:
            continue  # CPU-only or malformed entries: nothing to rent as a GPU
        canon = runpod_gpu(raw, memory, registry) or runpod_gpu(
            str(gt.get("displayName") or ""), memory, registry
        )
        flags = () if canon else (FLAG_UNKNOWN_GPU,)
        gpu = canon or raw
        max_count = int(gt.get("maxGpuCount") or 1)
        for cloud_type, price_key, avail_key in CLOUD_TYPES:
            price = gt.get(price_key)
            if not price or float(price) <= 0 or gt.get(avail_key) is False:
                continue
            for count in (c for c in GPU_COUNTS if c <= max_count):
                out.append(
                    Offer(
                        provider="runpod",
                        instance_type=instance_type_name(count, gpu, cloud_type),
                        region=LIVE_REGION,
                        zone="",
                        market="on_demand",
                        gpu=gpu,
                        gpu_count=count,
                        gpu_memory_gb=memory,
                        vcpus=vcpus_per_gpu * count,
                        memory_gb=memory_gb_per_gpu * count,
                        price_per_hour=round(float(price) * count, 6),
                        price_source=SOURCE,
                        observed_at=observed_at,
                        flags=flags,
                        extra={"gpu_type_id": raw, "cloud_type": cloud_type},
                    )
                )
    return out


def cloud_type_of(instance_type: str, extra: Mapping[str, Any]) -> str:
    """SECURE or COMMUNITY, from the offer's extra or its name suffix (snapshot offers)."""
    explicit = str(extra.get("cloud_type") or "").upper()
    if explicit in ("SECURE", "COMMUNITY"):
        return explicit
    return "COMMUNITY" if instance_type.upper().endswith("_COMMUNITY") else "SECURE"


def find_gpu_type_id(
    gpu_types: Iterable[Mapping[str, Any]], canonical: str, registry: GpuRegistry
) -> str | None:
    """The RunPod gpuTypeId whose GPU is ``canonical`` (for offers from the snapshot)."""
    for gt in gpu_types:
        raw = str(gt.get("id") or "")
        memory = float(gt.get("memoryInGb") or 0) or None
        if raw == canonical:
            return raw
        names = (raw, str(gt.get("displayName") or ""))
        if any(runpod_gpu(n, memory, registry) == canonical for n in names):
            return raw
    return None
