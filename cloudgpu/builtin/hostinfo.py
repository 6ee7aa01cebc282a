"""What a machine has: GPUs (from nvidia-smi), vCPUs, RAM and free scratch space.

Used by the built-in providers to describe this machine (local) or a host reached over
SSH (ssh, whose probe output is parsed here). Nothing here changes the machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cloudgpu.catalog.gpus import load_registry

# One query nvidia-smi answers on every driver since 2015; memory in MiB.
NVIDIA_SMI_QUERY = "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"


@dataclass(frozen=True)
class GpuInfo:
    name: str  # canonical when the registry knows it, else nvidia-smi's name
    count: int
    memory_gb: float  # per GPU


NO_GPU = GpuInfo("", 0, 0.0)


def parse_nvidia_smi(text: str) -> GpuInfo:
    """Parse NVIDIA_SMI_QUERY output ("NVIDIA A100-SXM4-80GB, 81920" per line)."""
    rows = [line.split(",") for line in text.strip().splitlines() if "," in line]
    if not rows:
        return NO_GPU
    raw = rows[0][0].strip()
    try:
        mem_gb = float(rows[0][1].strip()) * 1024**2 / 1e9
    except ValueError:
        mem_gb = 0.0
    name = load_registry().canonical(raw.removeprefix("NVIDIA "), mem_gb) or raw
    return GpuInfo(name, len(rows), round(mem_gb, 1))


def local_gpus() -> GpuInfo:
    """GPUs of this machine; none when nvidia-smi is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return NO_GPU
    try:
        proc = subprocess.run(
            NVIDIA_SMI_QUERY.split(), capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return NO_GPU
    return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else NO_GPU


def memory_gb() -> float:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0.0
    return round(pages * size / 1e9, 1)


def vcpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def free_gb(path: Path) -> float:
    """Free space of the filesystem holding ``path`` (its nearest existing parent)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return round(shutil.disk_usage(p).free / 1e9, 1)
