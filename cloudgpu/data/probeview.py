"""Probe results in words, for commands that show them (`status`, `plan`, `offers`)
without loading the planner the verdict needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summary(result: Mapping[str, Any]) -> str:
    """One line of the measurements."""
    d = result["disk"]
    line = (
        f"NVMe {d['seq_read_gbs']:.2f} GB/s sequential read, {d['rand_4k_iops']:,} IOPS 4 KiB "
        f"random, {d['small_files_per_s']:,} small files/s"
    )
    g = result.get("gpu") or {}
    if g.get("status") == "measured":
        line += (
            f"; GPU {g.get('name', '?')}: {g['bf16_tflops']:.0f} BF16 TFLOPS, "
            f"HBM {g['hbm_gbs']:.0f} GB/s, H2D {g['h2d_gbs']:.1f} GB/s"
        )
    elif g and g.get("reason") != "not asked for":
        line += f"; GPU: {g.get('reason', 'skipped')}"
    return line
