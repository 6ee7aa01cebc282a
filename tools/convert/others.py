"""RunPod, Lambda and Vast tables (whole-instance prices per region or zone).

* RunPod: InstanceType "<N>x_<GPU>_<SECURE|COMMUNITY>"; "A100-80GB" and "H100" are its
  PCIe cards (the provider's own name map, runpod_gpu), "*-SXM" the SXM ones. The L40S SECURE rows
  publish spot > on-demand: kept and flagged (common.emit).
* Lambda: on-demand only (the table's SpotPrice is empty: not offered, not counted as a
  missing price). "_pcie"/"_sxm4"/"_sxm5" in the type tells the form factor; Lambda's
  own descriptions list the plain 1x/2x/4x A100 types as 40 GB PCIe, 8x as SXM4
  (https://docs.lambda.ai/public-cloud/on-demand/).
* Vast: SpotPrice is 0.00 in every row, which means "not captured", not free: no spot
  offers, counted. GpuInfo memory is the instance total, divided by the count here.
  The form factor is in the type ("1x-H100_SXM-32-65536", "4x-H100_NVL-...").
"""

from __future__ import annotations

import ast
from pathlib import Path

from cloudgpu_providers.runpod.offers import runpod_gpu
from cloudgpu_providers.vast.offers import place_name

from tools.convert.common import Context, Row, emit, mib_to_gb, read_rows


def convert_runpod(ctx: Context, csv_path: Path) -> None:
    for raw in read_rows(csv_path):
        emit(ctx, Row(
            instance_type=raw["InstanceType"], region=raw["Region"],
            zone=raw["AvailabilityZone"], gpu_raw=raw["AcceleratorName"],
            gpu_count=int(float(raw["AcceleratorCount"])), gpu_memory_gb=None,
            vcpus=float(raw["vCPUs"]), memory_gb=float(raw["MemoryGiB"]),
            price=raw["Price"], spot=raw["SpotPrice"],
            gpu_hint=runpod_gpu(raw["AcceleratorName"], None, ctx.registry),
        ))  # fmt: skip


def _gpu_info_mem(text: str, count: int, total: bool) -> float | None:
    if not text:
        return None
    mib = ast.literal_eval(text)["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
    return mib_to_gb(mib / count if total and count else mib)


def _lambda_hint(ctx: Context, itype: str, accel: str, count: int, mem: float | None) -> str | None:
    t = itype.lower()
    if accel in ("A100", "A100-80GB"):
        size = "80GB" if (mem or 0) >= 60 or "80gb" in t else "40GB"
        form = "SXM" if "sxm" in t or count == 8 else "PCIe"
        return f"A100-{size}-{form}"
    if accel == "H100":
        return "H100-PCIe" if "pcie" in t else "H100-SXM"
    return None


def convert_lambda(ctx: Context, csv_path: Path) -> None:
    for raw in read_rows(csv_path):
        count = int(float(raw["AcceleratorCount"]))
        # Lambda's GpuInfo gives per-GPU memory despite the "Total" key (8x V100: 16384).
        mem = _gpu_info_mem(raw["GpuInfo"], count, total=False)
        emit(ctx, Row(
            instance_type=raw["InstanceType"], region=raw["Region"], zone="",
            gpu_raw=raw["AcceleratorName"], gpu_count=count, gpu_memory_gb=mem,
            vcpus=float(raw["vCPUs"]), memory_gb=float(raw["MemoryGiB"]),
            price=raw["Price"], spot="",
            gpu_hint=_lambda_hint(ctx, raw["InstanceType"], raw["AcceleratorName"], count, mem),
        ), spot_allowed=False)  # fmt: skip


def convert_vast(ctx: Context, csv_path: Path) -> None:
    for raw in read_rows(csv_path):
        count = int(float(raw["AcceleratorCount"]))
        mem = _gpu_info_mem(raw["GpuInfo"], count, total=True)
        form = raw["InstanceType"].split("-")[1] if "-" in raw["InstanceType"] else ""
        hint = ctx.registry.canonical(form, mem)
        emit(ctx, Row(
            instance_type=raw["InstanceType"], region=place_name(raw["Region"]), zone="",
            gpu_raw=raw["AcceleratorName"], gpu_count=count, gpu_memory_gb=mem,
            vcpus=float(raw["vCPUs"]), memory_gb=float(raw["MemoryGiB"]),
            price=raw["Price"], spot="", gpu_hint=hint,
        ), spot_allowed=False)  # fmt: skip
        if raw["SpotPrice"].strip() in ("0", "0.0", "0.00"):
            ctx.skipped["spot: 0.00 means not captured (Vast)"] += 1
