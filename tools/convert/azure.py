"""Azure: catalogs/v6/azure/vms.csv (NC/ND/NV families), priced per region (no zone).

The GPU model and count come from the documented VM sizes
(https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/), because the
table's AcceleratorName is missing for some sizes (NCC40ads_H100_v5, NC*ads_A10_v4,
ND40s_v3) and ambiguous for others ("H100" is an H100 NVL on NC H100 v5 and an H100 SXM
on ND H100 v5). Quirks handled on purpose:
* the one plain error of the table: Standard_ND96isr_H100_v5 is published with 12 GPUs;
  the documented size has 8 H100 80 GB, so 8 is used and the offer is flagged
  FLAG_GPU_COUNT_CORRECTED;
* fractional-GPU sizes (NV*as_v4: 1/8..1/1 of an MI25; NV*ads_A10_v5: 1/6..1/1 of an
  A10) are published with count 1; they keep count 1 with the documented share of GPU
  memory and are flagged FLAG_FRACTIONAL_GPU (+ FLAG_GPU_MEMORY_CORRECTED);
* empty prices (the A10_v4 sizes, ND40s_v3) are skipped with a counted reason;
* a spot price equal to on-demand (the H100 sizes) is kept as published.
"""

from __future__ import annotations

from pathlib import Path

from cloudgpu_providers.azure.sizes import size_gpu

from cloudgpu.catalog.offer import (
    FLAG_FRACTIONAL_GPU,
    FLAG_GPU_COUNT_CORRECTED,
    FLAG_GPU_MEMORY_CORRECTED,
)
from tools.convert.common import Context, Row, emit, read_rows

# size -> (documented GPU count, GPU memory per VM in GB when a fraction of a GPU,
#          local NVMe devices, size GB). Sources: the Azure size pages linked above and
# the AKS VM-size list (Standard_ND96isr_H100_v5 -- 96 vCPUs -- 1900 GB RAM -- 8 GPU(s):
# https://aspire.dev/reference/api/csharp/aspire.hosting.azure.kubernetes/standardndsh100v5/).
# Local NVMe is left 0 (unknown) except NC A100 v4 (960 GiB NVMe per GPU, size page),
# because the table has no disk column and the other figures could not be confirmed.
_DOCUMENTED: dict[str, tuple[int, float | None, int, float]] = {
    "Standard_ND96isr_H100_v5": (8, None, 0, 0.0),
    "Standard_ND96amsr_A100_v4": (8, None, 0, 0.0),
    "Standard_ND96asr_v4": (8, None, 0, 0.0),
    "Standard_NC24ads_A100_v4": (1, None, 1, 960.0),
    "Standard_NC48ads_A100_v4": (2, None, 2, 960.0),
    "Standard_NC96ads_A100_v4": (4, None, 4, 960.0),
    "Standard_NC40ads_H100_v5": (1, None, 0, 0.0),
    "Standard_NCC40ads_H100_v5": (1, None, 0, 0.0),
    "Standard_NC80adis_H100_v5": (2, None, 0, 0.0),
    "Standard_ND40rs_v2": (8, None, 0, 0.0),
    "Standard_ND40s_v3": (8, None, 0, 0.0),
    "Standard_NV4as_v4": (1, 2.0, 0, 0.0),
    "Standard_NV8as_v4": (1, 4.0, 0, 0.0),
    "Standard_NV16as_v4": (1, 8.0, 0, 0.0),
    "Standard_NV6ads_A10_v5": (1, 4.0, 0, 0.0),
    "Standard_NV12ads_A10_v5": (1, 8.0, 0, 0.0),
    "Standard_NV18ads_A10_v5": (1, 12.0, 0, 0.0),
    "Standard_NC8ads_A10_v4": (1, 8.0, 0, 0.0),
    "Standard_NC16ads_A10_v4": (1, 16.0, 0, 0.0),
    "Standard_NC32ads_A10_v4": (1, None, 0, 0.0),
}


def _row(raw: dict[str, str], ctx: Context) -> Row:
    size = raw["InstanceType"]
    canon = size_gpu(size)
    count = int(float(raw["AcceleratorCount"] or 0))
    doc_count, fraction_mem, nvme_n, nvme_gb = _DOCUMENTED.get(size, (count, None, 0, 0.0))
    flags: list[str] = []
    if doc_count != count:  # includes sizes published with no count at all
        ctx.notes.append(
            f"{size}: table says {count or 'no'} GPUs, documented {doc_count}; using {doc_count}"
        )
        flags.append(FLAG_GPU_COUNT_CORRECTED)
    mem = fraction_mem
    if fraction_mem is not None:
        flags += [FLAG_FRACTIONAL_GPU, FLAG_GPU_MEMORY_CORRECTED]
    return Row(
        instance_type=size, region=raw["Region"], zone="",
        gpu_raw=raw["AcceleratorName"] or size, gpu_count=doc_count, gpu_memory_gb=mem,
        vcpus=float(raw["vCPUs"]), memory_gb=float(raw["MemoryGiB"]),
        price=raw["Price"], spot=raw["SpotPrice"], nvme_count=nvme_n, nvme_size_gb=nvme_gb,
        flags=tuple(dict.fromkeys(flags)), gpu_hint=canon,
    )  # fmt: skip


def convert(ctx: Context, csv_path: Path) -> None:
    """Every row of a documented GPU size becomes offers; a size with no GPU count in
    the table nor in _DOCUMENTED is skipped with a counted reason."""
    seen: set[tuple[str, str]] = set()
    for raw in read_rows(csv_path):
        key = (raw["InstanceType"], raw["Region"])
        if key in seen:  # a size can repeat per Hyper-V generation; same price
            ctx.skipped["duplicate size/region row (other Hyper-V generation)"] += 1
            continue
        seen.add(key)
        row = _row(raw, ctx)
        if row.gpu_count < 1:
            ctx.skipped[f"{raw['InstanceType']}: no GPU count in table or docs"] += 1
            continue
        emit(ctx, row)
