"""Buy versus rent on the user's own history: the GPU-hours actually rented, what they
cost, and what owning enough servers for them would have cost over the same window.

Owned capacity is sized to the peak number of GPUs of a type running at once (whole
servers), and its yearly cost is charged pro rata for the window at the utilization
those hours imply. Records and hardware are passed in; nothing is loaded here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cloudgpu.costs.defaults import TcoInputs
from cloudgpu.costs.spend import gpu_hours
from cloudgpu.costs.tco import HOURS_PER_YEAR, Hardware, owned_cost
from cloudgpu.errors import ConfigError
from cloudgpu.state.store import SpendRecord


@dataclass(frozen=True)
class HistoryRow:
    gpu: str
    gpu_hours: float
    rented_cost: float
    peak_gpus: int
    servers: int
    utilization: float | None  # of the owned servers over the window
    owned_cost: float | None  # None when no purchase price is known for this GPU
    note: str = ""

    @property
    def saving(self) -> float | None:
        """What owning would have saved (negative: it would have cost more)."""
        return None if self.owned_cost is None else self.rented_cost - self.owned_cost

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "gpu_hours": round(self.gpu_hours, 3),
            "rented_cost": round(self.rented_cost, 2),
            "peak_gpus": self.peak_gpus,
            "servers": self.servers,
            "utilization": None if self.utilization is None else round(self.utilization, 4),
            "owned_cost": None if self.owned_cost is None else round(self.owned_cost, 2),
            "saving_if_owned": None if self.saving is None else round(self.saving, 2),
            "note": self.note,
        }


def peak_concurrent_gpus(records: Sequence[SpendRecord]) -> int:
    """Most GPUs running at the same moment (an end and a start at one instant don't overlap)."""
    edges: list[tuple[float, int]] = []
    for r in records:
        edges.append((r.started_at, r.gpu_count))
        edges.append((max(r.ended_at, r.started_at), -r.gpu_count))
    running = peak = 0
    for _, delta in sorted(edges, key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    return peak


def history_rows(
    records: Sequence[SpendRecord],
    window_days: float,
    hardware: Mapping[str, Hardware | str],
    inputs: TcoInputs,
) -> list[HistoryRow]:
    """One row per GPU type rented; ``hardware`` maps GPU -> server, or -> why not."""
    if window_days <= 0:
        raise ConfigError(
            f"--from-history: the window must be longer than 0 days, got {window_days:g}"
        )
    gpu_records: dict[str, list[SpendRecord]] = defaultdict(list)
    for r in records:
        if r.gpu and r.gpu_count > 0:
            gpu_records[r.gpu].append(r)
    if not gpu_records:
        raise ConfigError(
            f"no GPU spend recorded in the last {window_days:g} days",
            hint="--from-history needs instances launched by cloudgpu in that window",
        )
    return [
        _row(gpu, recs, window_days, hardware.get(gpu, "no purchase price known"), inputs)
        for gpu, recs in sorted(gpu_records.items())
    ]


def _row(
    gpu: str, recs: list[SpendRecord], days: float, hw: Hardware | str, inputs: TcoInputs
) -> HistoryRow:
    hours = math.fsum(gpu_hours(r) for r in recs)
    rented = math.fsum(r.cost for r in recs)
    peak = peak_concurrent_gpus(recs)
    if isinstance(hw, str):
        return HistoryRow(gpu, hours, rented, peak, 0, None, None, note=hw)
    servers = max(1, math.ceil(peak / hw.gpus))
    capacity = servers * hw.gpus * HOURS_PER_YEAR * days / 365.0
    u = min(1.0, hours / capacity)
    yearly = owned_cost(hw, inputs).total_yr(u)
    owned = servers * yearly * days / 365.0
    return HistoryRow(gpu, hours, rented, peak, servers, u, owned)
