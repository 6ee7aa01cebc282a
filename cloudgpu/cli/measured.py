"""Measured columns beside the datasheet ones in `offers` and `gpus`, from the data probes
the user ran (cloudgpu.state.probes): NVMe GB/s per (provider, instance type), dense BF16
TFLOPS and HBM per GPU model. A column appears only once some row has a measurement;
a row without one shows "-", never an estimate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cloudgpu.catalog.present import Column
from cloudgpu.cli.context import App
from cloudgpu.state import probes


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:,.2f}" if x < 10 else f"{x:,.0f}"


def _latest(app: App) -> list[probes.ProbeRecord]:
    if not app.paths.state_db.exists():
        return []
    store = app.store()
    try:
        return probes.probes(store)
    finally:
        store.close()


def _insert(columns: Sequence[Column], after: str, extra: list[Column]) -> tuple[Column, ...]:
    out: list[Column] = []
    for c in columns:
        out.append(c)
        if c.key == after:
            out += extra
    return tuple(out)


def offers(
    app: App, records: list[dict[str, Any]], columns: Sequence[Column], keys: Sequence[str]
) -> tuple[tuple[Column, ...], tuple[str, ...]]:
    """Adds ``measured_nvme_gbs`` / ``measured_bf16_tflops`` to the offer records that
    have a probe of their (provider, instance type); the columns and CSV keys to show."""
    latest = {(r.provider, r.instance_type): r for r in _latest(app)}
    if not any((r["provider"], r["instance_type"]) in latest for r in records):
        return tuple(columns), tuple(keys)
    for r in records:
        rec = latest.get((r["provider"], r["instance_type"]))
        gpu = rec.gpu_measured if rec is not None else None
        r["measured_nvme_gbs"] = rec.result["disk"]["seq_read_gbs"] if rec is not None else None
        r["measured_bf16_tflops"] = gpu.get("bf16_tflops") if gpu else None
    extra = [Column("NVME_GB/S_MEAS", "measured_nvme_gbs", _num, True)]
    if any(r["measured_bf16_tflops"] is not None for r in records):
        extra.append(Column("BF16_TF_MEAS", "measured_bf16_tflops", _num, True))
    added = tuple(c.key for c in extra)
    return _insert(columns, "nvme_gb", extra), (*keys, *added)


def gpus(app: App, records: list[dict[str, Any]], columns: Sequence[Column]) -> tuple[Column, ...]:
    """Adds ``measured_bf16_tflops`` / ``measured_hbm_gbs`` (the newest measurement of
    each GPU model on any instance) beside the datasheet's."""
    by_gpu: dict[str, dict[str, Any]] = {}
    for rec in _latest(app):
        g = rec.gpu_measured
        if g and rec.gpu:
            by_gpu[rec.gpu] = g
    if not any(r["name"] in by_gpu for r in records):
        return tuple(columns)
    for r in records:
        g = by_gpu.get(r["name"])
        r["measured_bf16_tflops"] = g.get("bf16_tflops") if g else None
        r["measured_hbm_gbs"] = g.get("hbm_gbs") if g else None
    return _insert(
        columns,
        "bf16_tflops",
        [
            Column("BF16_MEAS", "measured_bf16_tflops", _num, True),
            Column("HBM_GB/S_MEAS", "measured_hbm_gbs", _num, True),
        ],
    )
