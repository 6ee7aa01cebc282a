"""Probe measurements in the state store: one row per probe run, kept per (provider,
instance type) so `offers`, `gpus`, `status` and the plan report can show measured
figures beside the datasheet's.

The table is created on first use (``CREATE TABLE IF NOT EXISTS``): it is additive and
needs no schema-version step. Only numbers and names are stored, never a URL or a key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudgpu.state.store import Store

_TABLE = """
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    gpu TEXT NOT NULL DEFAULT '',
    measured_at REAL NOT NULL,
    result TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class ProbeRecord:
    job_id: str
    provider: str
    instance_type: str
    gpu: str
    measured_at: float
    result: dict[str, Any]

    @property
    def gpu_measured(self) -> dict[str, Any] | None:
        g = self.result.get("gpu") or {}
        return g if g.get("status") == "measured" else None


def record(
    store: Store,
    job_id: str,
    provider: str,
    instance_type: str,
    gpu: str,
    measured_at: float,
    result: Mapping[str, Any],
) -> None:
    with store.tx() as c:
        c.execute(_TABLE)
        c.execute(
            "INSERT INTO probes(job_id, provider, instance_type, gpu, measured_at, result) "
            "VALUES(?, ?, ?, ?, ?, ?)",
            (job_id, provider, instance_type, gpu, measured_at, json.dumps(dict(result))),
        )


def probes(store: Store, job_id: str | None = None) -> list[ProbeRecord]:
    """All probe runs (of one job), oldest first."""
    with store.tx() as c:
        c.execute(_TABLE)
        rows = c.execute(
            "SELECT job_id, provider, instance_type, gpu, measured_at, result FROM probes "
            + ("WHERE job_id=? " if job_id else "")
            + "ORDER BY measured_at",
            (job_id,) if job_id else (),
        ).fetchall()
    return [ProbeRecord(r[0], r[1], r[2], r[3], float(r[4]), json.loads(r[5])) for r in rows]


def latest_by_type(store: Store) -> dict[tuple[str, str], ProbeRecord]:
    """The newest probe of each (provider, instance type)."""
    out: dict[tuple[str, str], ProbeRecord] = {}
    for rec in probes(store):
        out[(rec.provider, rec.instance_type)] = rec
    return out


def measured_gpus(store: Store) -> dict[str, dict[str, Any]]:
    """GPU model -> the newest measured GPU figures of any instance with it."""
    out: dict[str, dict[str, Any]] = {}
    for rec in probes(store):
        g = rec.gpu_measured
        if g and rec.gpu:
            out[rec.gpu] = {**g, "provider": rec.provider, "instance_type": rec.instance_type}
    return out
