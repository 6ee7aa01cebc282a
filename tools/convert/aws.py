"""AWS: catalogs/v7/aws/vms.csv rows, cross-checked against describe_instance_types.

The documented sizes come from AWS's own DescribeInstanceTypes data as moto ships it
(moto/ec2/resources/instance_types.json.gz). Quirks handled on purpose:
* GPU/accelerator count, per-device memory, vCPUs and RAM: the documented value wins
  when the table disagrees, and the offer is flagged FLAG_GPU_COUNT_CORRECTED /
  FLAG_GPU_MEMORY_CORRECTED (the counts agree in this snapshot; the check stays so a
  new table cannot slip a wrong count through);
* local NVMe (device count x size) and network performance come from the same data,
  since the price table has neither; types moto lacks (p3, g4ad, dl1, f1) use the
  documented figures in _UNDOCUMENTED_IN_MOTO;
* on-demand prices of the P4d/P4de/P5/P5e/P5en families predate AWS's mid-2025 cut of
  up to ~45% (p5.48xlarge us-east-1: table $98.32/h, later list price $55.04/h), so
  they are kept but flagged FLAG_PRICE_PREDATES_CUT;
* empty on-demand prices (p5e.48xlarge, trn1.32xlarge in two regions) are skipped and
  counted; their spot prices are still offered.
"""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path
from typing import Any

from cloudgpu_providers.aws.refresh import network_gbps, parse_type

from cloudgpu.catalog.offer import (
    FLAG_GPU_COUNT_CORRECTED,
    FLAG_GPU_MEMORY_CORRECTED,
    FLAG_PRICE_PREDATES_CUT,
)
from tools.convert.common import Context, Row, emit, mib_to_gb, read_rows

# https://aws.amazon.com/blogs/aws/announcing-up-to-45-price-reduction-for-amazon-ec2-nvidia-gpu-accelerated-instances/
PRICE_CUT_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en")

# Instance types missing from moto's table, from the AWS instance-type pages
# (https://aws.amazon.com/ec2/instance-types/{p3,g4,dl1,f1}/): (nvme_count, size_gb, gbps).
_UNDOCUMENTED_IN_MOTO: dict[str, tuple[int, float, float]] = {
    "p3.2xlarge": (0, 0.0, 10.0),
    "p3.8xlarge": (0, 0.0, 10.0),
    "p3.16xlarge": (0, 0.0, 25.0),
    "g4ad.xlarge": (1, 150.0, 10.0),
    "g4ad.2xlarge": (1, 300.0, 10.0),
    "g4ad.4xlarge": (1, 600.0, 10.0),
    "g4ad.8xlarge": (1, 1200.0, 15.0),
    "g4ad.16xlarge": (1, 2400.0, 25.0),
    "dl1.24xlarge": (4, 1000.0, 400.0),
    "f1.2xlarge": (1, 470.0, 10.0),
    "f1.4xlarge": (1, 940.0, 10.0),
    "f1.16xlarge": (4, 940.0, 25.0),
}


def load_instance_types(path: Path) -> dict[str, dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        data: dict[str, dict[str, Any]] = json.load(fh)
    return data


def _devices(doc: dict[str, Any]) -> list[dict[str, Any]]:
    for info, key in (
        ("GpuInfo", "Gpus"),
        ("NeuronInfo", "NeuronDevices"),
        ("InferenceAcceleratorInfo", "Accelerators"),
        ("FpgaInfo", "Fpgas"),
    ):
        devices = (doc.get(info) or {}).get(key)
        if devices:
            return list(devices)
    return []


def _documented(doc: dict[str, Any] | None, itype: str) -> dict[str, Any]:
    """What DescribeInstanceTypes says of ``itype``: for GPU types, read by the AWS
    provider's own parser (what a live refresh reports); for other accelerators
    (Inferentia, Trainium, FPGAs), which the provider does not offer, read here."""
    if doc is None:
        nvme_count, nvme_size, gbps = _UNDOCUMENTED_IN_MOTO.get(itype, (0, 0.0, 0.0))
        return {"nvme_count": nvme_count, "nvme_size_gb": nvme_size, "network_gbps": gbps}
    info = parse_type(doc)
    if info is not None:
        return {
            "nvme_count": info.nvme_count,
            "nvme_size_gb": info.nvme_size_gb,
            "network_gbps": info.network_gbps,
            "count": info.gpu_count,
            "mem_gb": info.gpu_memory_gb,
            "vcpus": float(info.vcpus),
            "memory_gb": info.memory_gb,
        }
    disks = [d for d in (doc.get("InstanceStorageInfo") or {}).get("Disks", [])]
    devices = _devices(doc)
    return {
        "nvme_count": sum(int(d["Count"]) for d in disks),
        "nvme_size_gb": float(disks[0]["SizeInGB"]) if disks else 0.0,
        "network_gbps": network_gbps(doc.get("NetworkInfo") or {}),
        "count": sum(int(d["Count"]) for d in devices) if devices else None,
        "mem_gb": mib_to_gb(devices[0]["MemoryInfo"]["SizeInMiB"]) if devices else None,
        "vcpus": float(doc["VCpuInfo"]["DefaultVCpus"]),
        "memory_gb": mib_to_gb(doc["MemoryInfo"]["SizeInMiB"]),
    }


def _table_gpu_memory(gpu_info: str) -> float | None:
    if not gpu_info:
        return None
    info = ast.literal_eval(gpu_info)  # Python-dict-like text, as published
    return mib_to_gb(info["Gpus"][0]["MemoryInfo"]["SizeInMiB"])


def _row(raw: dict[str, str], doc: dict[str, Any] | None) -> Row:
    itype = raw["InstanceType"]
    documented = _documented(doc, itype)
    count = int(float(raw["AcceleratorCount"]))
    mem = _table_gpu_memory(raw["GpuInfo"])
    flags: list[str] = []
    if documented.get("count") is not None and documented["count"] != count:
        count, flags = documented["count"], [*flags, FLAG_GPU_COUNT_CORRECTED]
    doc_mem = documented.get("mem_gb")
    if doc_mem is not None and mem is not None and abs(doc_mem - mem) > 0.5:
        flags.append(FLAG_GPU_MEMORY_CORRECTED)
    mem = doc_mem if doc_mem is not None else mem
    family = itype.split(".")[0]
    return Row(
        instance_type=itype,
        region=raw["Region"],
        zone=raw["AvailabilityZone"],
        gpu_raw=raw["AcceleratorName"],
        gpu_count=count,
        gpu_memory_gb=mem,
        vcpus=documented.get("vcpus") or float(raw["vCPUs"]),
        memory_gb=documented.get("memory_gb") or float(raw["MemoryGiB"]),
        price=raw["Price"],
        spot=raw["SpotPrice"],
        nvme_count=documented["nvme_count"],
        nvme_size_gb=documented["nvme_size_gb"],
        network_gbps=documented["network_gbps"],
        flags=tuple(flags),
        on_demand_flags=(FLAG_PRICE_PREDATES_CUT,) if family in PRICE_CUT_FAMILIES else (),
    )


def convert(ctx: Context, csv_path: Path, instance_types: dict[str, dict[str, Any]]) -> None:
    missing: set[str] = set()
    for raw in read_rows(csv_path):
        doc = instance_types.get(raw["InstanceType"])
        if doc is None:
            missing.add(raw["InstanceType"])
        emit(ctx, _row(raw, doc))
    if missing:
        ctx.notes.append(
            "not in describe_instance_types data (table values kept, NVMe from AWS pages): "
            + ", ".join(sorted(missing))
        )
