"""Measured job speed in the state store: one row per finished run that reported its
throughput, with the machine it ran on and the workload it ran, so the planner can
correct later estimates for the same GPU class and model size.

The table is created on first use (``CREATE TABLE IF NOT EXISTS``): it is additive and
needs no schema-version step. Only numbers, names and the job's own workload block are
stored: never a command, an environment value or a path from the instance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cloudgpu.state.store import Store

_TABLE = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    gpu TEXT NOT NULL,
    gpu_count INTEGER NOT NULL,
    num_nodes INTEGER NOT NULL DEFAULT 1,
    network_gbps REAL NOT NULL DEFAULT 0,
    layout TEXT NOT NULL DEFAULT '',
    workload TEXT NOT NULL,
    tokens_per_s REAL NOT NULL,
    source TEXT NOT NULL,
    recorded_at REAL NOT NULL
)
"""


@dataclass(frozen=True)
class RunRecord:
    job_id: str
    provider: str
    instance_type: str
    gpu: str
    gpu_count: int  # per node
    tokens_per_s: float  # the whole job's, as it reported it
    source: str  # "stdout" | "file"
    recorded_at: float
    workload: dict[str, Any] = field(default_factory=dict)
    num_nodes: int = 1
    network_gbps: float = 0.0
    layout: str = ""


def record(store: Store, rec: RunRecord) -> None:
    with store.tx() as c:
        c.execute(_TABLE)
        c.execute(
            "INSERT INTO runs(job_id, provider, instance_type, gpu, gpu_count, num_nodes, "
            "network_gbps, layout, workload, tokens_per_s, source, recorded_at) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rec.job_id,
                rec.provider,
                rec.instance_type,
                rec.gpu,
                rec.gpu_count,
                rec.num_nodes,
                rec.network_gbps,
                rec.layout,
                json.dumps(rec.workload, sort_keys=True, default=str),
                rec.tokens_per_s,
                rec.source,
                rec.recorded_at,
            ),
        )


def runs(store: Store, job_id: str | None = None) -> list[RunRecord]:
    """Every recorded run (of one job), oldest first."""
    with store.tx() as c:
        c.execute(_TABLE)
        rows = c.execute(
            "SELECT job_id, provider, instance_type, gpu, gpu_count, tokens_per_s, source, "
            "recorded_at, workload, num_nodes, network_gbps, layout FROM runs "
            + ("WHERE job_id=? " if job_id else "")
            + "ORDER BY recorded_at, id",
            (job_id,) if job_id else (),
        ).fetchall()
    return [_record(r) for r in rows]


def _record(r: tuple) -> RunRecord:  # type: ignore[type-arg]
    job_id, provider, instance_type, gpu, count, tps, source, at, workload, nodes, net, lay = r
    return RunRecord(
        job_id=job_id,
        provider=provider,
        instance_type=instance_type,
        gpu=gpu,
        gpu_count=int(count),
        tokens_per_s=float(tps),
        source=source,
        recorded_at=float(at),
        workload=json.loads(workload),
        num_nodes=int(nodes),
        network_gbps=float(net),
        layout=lay,
    )
