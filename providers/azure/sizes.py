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
from collections.abc import Mapping
from dataclasses import dataclass
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
        )
    return out


def bundled_sizes() -> dict[str, SizeSpec]:
    """The size table shipped with the provider (sizes.csv next to this module)."""
    text = resources.files(__package__ or "cloudgpu_providers.azure").joinpath("sizes.csv")
    return parse_size_table(text.read_text(encoding="utf-8"))


def spec_from_capabilities(name: str, caps: dict[str, str]) -> SizeSpec | None:
    """A SizeSpec from one resource_skus.list entry's capabilities, or None if not a GPU size.

    ``caps`` is the SKU's capability list as a dict (``vCPUs``, ``MemoryGB``, ``GPUs``).
    The model still comes from the name: the API does not name it.
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
    return SizeSpec(name, vcpus, mem, gpus, gpu[0], gpu[1])


def restricted_regions(sku: Mapping[str, Any]) -> list[str]:
    """Regions where a resource_skus.list entry may not be used by this subscription
    (``restrictions`` of type Location, e.g. reasonCode NotAvailableForSubscription)."""
    out: list[str] = []
    for r in sku.get("restrictions") or []:
        if r.get("type") == "Location":
            out.extend(str(v) for v in r.get("values") or [])
    return out
