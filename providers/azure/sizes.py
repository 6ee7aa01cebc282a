"""Azure GPU VM sizes: the bundled size table and the GPU model read from a size name.

Azure's APIs give vCPUs, memory and the GPU *count* of a size (resource_skus.list), but
never the GPU model: that is only in the size name (``Standard_ND96isr_H100_v5`` is
8x H100) and in the size docs. This module holds both; it makes no network call and must
not import the Azure SDK.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

# The one Azure size table: series pattern -> (canonical GPU, the model as the size docs
# name it, memory per GPU in GB). Azure prices whole VM sizes and its APIs never name the
# GPU, so the size name is where it is read, by the live offers, the bundled size table
# and the snapshot converter alike. Source: learn.microsoft.com/azure/virtual-machines/
# sizes/overview and sizes/gpu-accelerated/ (2026-12-01). Order matters: the more
# specific pattern first.
_SERIES: tuple[tuple[re.Pattern[str], str, str, float], ...] = tuple(
    (re.compile(rf"^Standard_{pat}$", re.I), canonical, model, mem)
    for pat, canonical, model, mem in (
        (r"ND\d+is?r_H100_v5", "H100-SXM", "H100", 80.0),
        (r"NCC?\d+ads?i?s?_H100_v5", "H100-NVL", "H100 NVL", 94.0),
        (r"ND\d+is?r_H200_v5", "H200-SXM", "H200", 141.0),
        (r"ND\d+is?r_MI300X_v5", "MI300X", "MI300X", 192.0),
        (r"ND\d+amsr_A100_v4", "A100-80GB-SXM", "A100", 80.0),
        (r"ND\d+asr_v4", "A100-40GB-SXM", "A100", 40.0),
        (r"NC\d+ads_A100_v4", "A100-80GB-PCIe", "A100", 80.0),
        (r"NC\d+ads_A10_v4", "A10", "A10", 24.0),
        (r"NV\d+adm?s_A10_v5", "A10", "A10", 24.0),
        (r"NC\d+as_T4_v3", "T4", "T4", 16.0),
        (r"NC\d+ads_L4_v\d", "L4", "L4", 24.0),
        (r"ND\d+r?s_v[23]", "V100-32GB", "V100", 32.0),
        (r"NC\d+r?s_v3", "V100-16GB", "V100", 16.0),
        (r"NC\d+r?(_Promo)?", "K80", "K80", 12.0),
        (r"NV\d+as_v4", "MI25", "MI25", 16.0),
        (r"NV\d+s?_v3", "M60", "M60", 8.0),
        (r"NV\d+(_Promo)?", "M60", "M60", 8.0),
    )
)

# InfiniBand between VMs of a size, Gbit/s per VM, from the size docs (read 2026-12-01:
# nd-h100-v5-series "8x 400 Gb/s NVIDIA Quantum-2 CX7 InfiniBand", nd-h200-v5-series,
# ndmi300xv5-series the same; ndma100v4-series and ndasra100v4-series "8x 200 Gb/s HDR";
# ndv2-series "100 Gb/s EDR"). Only the bandwidth is read here: whether a size has
# InfiniBand at all is the SKU's RdmaEnabled capability when resource_skus.list answers;
# this table stands in for it only without credentials (the bundled sizes).
_IB_GBPS: tuple[tuple[re.Pattern[str], float], ...] = tuple(
    (re.compile(rf"^Standard_{pat}$", re.I), gbps)
    for pat, gbps in (
        (r"ND\d+is?r_(H100|H200|MI300X)_v5", 3200.0),
        (r"ND\d+amsr_A100_v4", 1600.0),
        (r"ND\d+asr_v4", 1600.0),
        (r"ND\d+rs_v2", 100.0),
    )
)
RDMA_DEFAULT_GBPS = 100.0  # an RDMA size the table does not list: EDR, the slowest in use

# Families cloudgpu prices: the GPU sizes (NC compute, ND deep learning, NV visualization).
GPU_FAMILY = re.compile(r"^Standard_N[CDV]", re.I)


@dataclass(frozen=True)
class SizeSpec:
    name: str
    vcpus: float
    memory_gb: float
    gpu_count: int
    gpu_model: str
    gpu_memory_gb: float
    nvme_count: int = 0
    nvme_size_gb: float = 0.0
    infiniband_gbps: float = 0.0  # 0: no InfiniBand (or not known to have it)


def infiniband_gbps(size: str, rdma: bool | None) -> float:
    """Gbit/s of InfiniBand per VM of ``size``: 0 when ``rdma`` (the SKU's RdmaEnabled)
    says none; ``rdma`` None (no SKU data): the documented sizes only."""
    if rdma is False:
        return 0.0
    for pattern, gbps in _IB_GBPS:
        if pattern.match(size.strip()):
            return gbps
    return RDMA_DEFAULT_GBPS if rdma else 0.0


def gpu_from_size_name(size: str) -> tuple[str, float] | None:
    """(GPU model, memory per GPU in GB) read from an Azure size name, or None."""
    for pattern, _canonical, model, mem in _SERIES:
        if pattern.match(size.strip()):
            return model, mem
    return None


def size_gpu(size: str) -> str | None:
    """The canonical GPU of an Azure VM size name, None when it is not a known GPU size."""
    for pattern, canonical, _model, _mem in _SERIES:
        if pattern.match(size.strip()):
            return canonical
    return None


def parse_size_table(text: str) -> dict[str, SizeSpec]:
    """Parse sizes.csv (``#`` lines are comments) into specs by lower-cased size name."""
    rows = (line for line in io.StringIO(text) if line.strip() and not line.startswith("#"))
    out: dict[str, SizeSpec] = {}
    for row in csv.reader(rows):
        name, vcpus, mem, count, model, gmem, nvn, nvs = (c.strip() for c in row)
        out[name.lower()] = SizeSpec(
            name=name,
            vcpus=float(vcpus),
            memory_gb=float(mem),
            gpu_count=int(count),
            gpu_model=model,
            gpu_memory_gb=float(gmem),
            nvme_count=int(nvn),
            nvme_size_gb=float(nvs),
            infiniband_gbps=infiniband_gbps(name, None),
        )
    return out


def bundled_sizes() -> dict[str, SizeSpec]:
    """The size table shipped with the provider (sizes.csv next to this module)."""
    text = resources.files(__package__ or "cloudgpu_providers.azure").joinpath("sizes.csv")
    return parse_size_table(text.read_text(encoding="utf-8"))


def spec_from_capabilities(name: str, caps: dict[str, str]) -> SizeSpec | None:
    """A SizeSpec from one resource_skus.list entry's capabilities, or None if not a GPU size.

    ``caps`` is the SKU's capability list as a dict (``vCPUs``, ``MemoryGB``, ``GPUs``,
    ``RdmaEnabled``). The model still comes from the name: the API does not name it.
    """
    gpus = int(float(caps.get("GPUs", "0") or 0))
    gpu = gpu_from_size_name(name)
    if gpus < 1 or gpu is None:
        return None
    try:
        vcpus = float(caps["vCPUs"])
        mem = float(caps["MemoryGB"])
    except (KeyError, ValueError):
        return None
    ib = infiniband_gbps(name, caps.get("RdmaEnabled", "False").lower() == "true")
    return SizeSpec(name, vcpus, mem, gpus, gpu[0], gpu[1], infiniband_gbps=ib)


def network_features(caps: Mapping[str, str]) -> tuple[bool, bool]:
    """(InfiniBand, accelerated networking) of a size, from its SKU capabilities
    ``RdmaEnabled`` and ``AcceleratedNetworkingEnabled`` (absent: no)."""

    def flag(key: str) -> bool:
        return str(caps.get(key, "False")).lower() == "true"

    return flag("RdmaEnabled"), flag("AcceleratedNetworkingEnabled")


def capabilities(sku: Mapping[str, Any]) -> dict[str, str]:
    """A resource_skus.list entry's capability list as a dict of name -> value."""
    return {str(c.get("name")): str(c.get("value")) for c in sku.get("capabilities") or []}


def sku_specs(
    skus: Iterable[Mapping[str, Any]], bundled: Mapping[str, SizeSpec]
) -> tuple[dict[str, SizeSpec], set[tuple[str, str]]]:
    """GPU size specs from resource_skus.list entries, and the (size, region) pairs
    restricted for this subscription. Local NVMe comes from ``bundled`` (the API does
    not report it; the docs do)."""
    out: dict[str, SizeSpec] = {}
    restricted: set[tuple[str, str]] = set()
    for sku in skus:
        if sku.get("resourceType") != "virtualMachines":
            continue
        name = str(sku.get("name"))
        spec = spec_from_capabilities(name, capabilities(sku))
        if spec is None:
            continue
        known = bundled.get(spec.name.lower())
        if known is not None:
            spec = replace(spec, nvme_count=known.nvme_count, nvme_size_gb=known.nvme_size_gb)
        out[spec.name.lower()] = spec
        restricted |= {(name.lower(), region) for region in restricted_regions(sku)}
    return out, restricted


def restricted_regions(sku: Mapping[str, Any]) -> list[str]:
    """Regions where a resource_skus.list entry may not be used by this subscription
    (``restrictions`` of type Location, e.g. reasonCode NotAvailableForSubscription)."""
    out: list[str] = []
    for r in sku.get("restrictions") or []:
        if r.get("type") == "Location":
            out.extend(str(v) for v in r.get("values") or [])
    return out
