"""GCP: catalogs/v7/gcp/vms.csv, where a GPU VM is priced in two rows.

The machine row (a2-/a3-/g2- InstanceType, vCPU + RAM price, no AcceleratorName) and the
accelerator row (empty InstanceType, AcceleratorName + AcceleratorCount) of the same
zone are SUMMED into one offer: machine + its documented number of GPUs. Spot likewise;
when either part has no spot price there is no spot offer. Quirks handled on purpose:
* which GPU and how many come from the documented machine shapes (_MACHINE_GPUS,
  https://cloud.google.com/compute/docs/accelerator-optimized-machines), not from the
  table, because machine rows carry no GPU at all;
* accelerator rows with no machine row (B200: the a4 family is not in the table; P100,
  P4, T4, V100: N1 host prices are not in the table) cannot make a complete VM price and
  are skipped with a counted reason, never priced as GPU-only;
* a machine row with no matching accelerator row in its zone is skipped, counted;
* a summed spot price above the summed on-demand price is flagged (8 H100 accelerator
  rows publish spot > on-demand).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from cloudgpu_providers.gcp.pricing import LOCAL_SSD_GB  # the provider's own figure

from tools.convert.common import Context, Row, emit, mib_to_gb, read_rows

# machine type -> (accelerator row name, count, local SSD devices x 375 GB)
_MACHINE_GPUS: dict[str, tuple[str, int, int]] = {
    **{f"a2-highgpu-{n}g": ("A100", n, 0) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16, 0),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n, n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n, 2 * n) for n in (1, 2, 4, 8)},
    "a3-edgegpu-8g": ("H100", 8, 16),
    "a3-edgegpu-8g-nolssd": ("H100", 8, 0),
    "a3-megagpu-8g": ("H100-MEGA", 8, 16),
    "a3-ultragpu-8g": ("H200", 8, 32),
    "a3-ultragpu-8g-nolssd": ("H200", 8, 0),
    # G2: one L4 per 4..32 vCPU size, then 2/4/8 (docs: G2 machine series)
    **{f"g2-standard-{v}": ("L4", 1, 0) for v in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2, 0),
    "g2-standard-48": ("L4", 4, 0),
    "g2-standard-96": ("L4", 8, 0),
}

# Documented network bandwidth (Gbps) per machine family where it is fixed.
_NETWORK = {"a3-megagpu": 1800.0, "a3-ultragpu": 3200.0, "a3-highgpu-8g": 1000.0}


def _network(machine: str) -> float:
    for prefix, gbps in _NETWORK.items():
        if machine.startswith(prefix):
            return gbps
    return 0.0


def _accel_key(name: str, count: str, zone: str) -> tuple[str, int, str]:
    return name, int(float(count)), zone


def _split(rows: Iterable[dict[str, str]]) -> tuple[list[dict[str, str]], dict]:
    machines: list[dict[str, str]] = []
    accels: dict[tuple[str, int, str], dict[str, str]] = {}
    for raw in rows:
        if raw["InstanceType"]:
            machines.append(raw)
        elif raw["AcceleratorName"]:
            accels[
                _accel_key(raw["AcceleratorName"], raw["AcceleratorCount"], raw["AvailabilityZone"])
            ] = raw
    return machines, accels


def _sum(a: str, b: str) -> str:
    """Sum of two published prices; "" when either is missing (no partial price)."""
    if not a.strip() or not b.strip():
        return ""
    return f"{float(a) + float(b):.6f}"


def _memory(accel: dict[str, str]) -> float | None:
    info = accel["GpuInfo"]
    return mib_to_gb(ast.literal_eval(info)["Gpus"][0]["MemoryInfo"]["SizeInMiB"]) if info else None


def convert(ctx: Context, csv_path: Path) -> None:
    machines, accels = _split(read_rows(csv_path))
    used: set[tuple[str, int, str]] = set()
    for m in machines:
        shape = _MACHINE_GPUS.get(m["InstanceType"])
        if shape is None:
            ctx.skipped[f"machine type {m['InstanceType']} has no documented GPU shape"] += 1
            continue
        gpu, count, ssd = shape
        key = (gpu, count, m["AvailabilityZone"])
        accel = accels.get(key)
        if accel is None:
            ctx.skipped["machine row without accelerator row in its zone"] += 1
            continue
        used.add(key)
        emit(ctx, Row(
            instance_type=m["InstanceType"], region=m["Region"], zone=m["AvailabilityZone"],
            gpu_raw=gpu, gpu_count=count, gpu_memory_gb=_memory(accel),
            vcpus=float(m["vCPUs"]), memory_gb=float(m["MemoryGiB"]),
            price=_sum(m["Price"], accel["Price"]), spot=_sum(m["SpotPrice"], accel["SpotPrice"]),
            nvme_count=ssd, nvme_size_gb=LOCAL_SSD_GB if ssd else 0.0,
            network_gbps=_network(m["InstanceType"]),
        ))  # fmt: skip
    for key in accels:
        if key not in used:
            reason = (
                "N1 host price not in table"
                if re.match(r"^(P100|P4|T4|V100)$", key[0])
                else "no machine row for it"
            )
            ctx.skipped[f"accelerator row {key[0]} skipped: {reason}"] += 1
