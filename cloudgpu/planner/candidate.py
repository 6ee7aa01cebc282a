"""The planner's results as values: a Candidate for each offer judged, the Plan that
ranks them, and the Estimates worth keeping between calls. Nothing here plans
(cloudgpu.planner.rank does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudgpu.catalog.offer import Offer
from cloudgpu.planner.fit import MemoryCache, ShapeEstimate
from cloudgpu.planner.workload import Workload


@dataclass
class Candidate:
    offer: Offer
    fits: bool
    reason: str = ""  # why it does not fit / was rejected ("" when it fits)
    num_nodes: int = 1
    memory_per_gpu_gib: float | None = None
    memory_breakdown: dict[str, float] = field(default_factory=dict)
    est_hours: float | None = None  # wall clock: compute + staging + startup + spot loss
    est_gpu_hours: float | None = None
    est_cost: float | None = None
    price_per_hour: float = 0.0  # all nodes together
    fix: str = ""  # cheapest change that would make it fit
    layout: str = ""  # e.g. "ZeRO-3, full checkpointing"
    scaling_efficiency: float | None = None
    stall_fraction: float = 0.0
    staging_hours: float = 0.0
    startup_hours: float = 0.0
    spot_penalty_hours: float = 0.0
    tokens_per_s: float | None = None  # average over the run, data stalls included
    calibration: str = ""  # "calibrated from N runs ..." when the user's runs corrected it
    note: str = ""  # e.g. a free tier's sessions and weeks of quota

    @property
    def gpu_count(self) -> int:
        return self.offer.gpu_count * self.num_nodes


@dataclass
class Plan:
    candidates: list[Candidate]  # fitting, best first
    rejected: list[Candidate]  # with .reason
    objective: str
    summary: str = ""
    needs: str = ""  # what would fit when nothing does
    workload: Workload | None = None
    # Free tiers the job fits but does not name (Kaggle, Colab): shown beside the plan.
    free: list[Candidate] = field(default_factory=list)

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


ShapeKey = tuple[Workload, int, str, float, int, float]


@dataclass
class Estimates:
    """What plan() works out per machine shape, worth keeping between calls for the same
    job (a service re-planning it over fresh offers, a test judging offers one at a
    time): each shape's layout search, its cheapest fix, the fewest GPUs of a size that
    fit, and memory per layout. Every entry is keyed by the workload and node count too,
    so one instance may serve several jobs; plan() makes its own when given none."""

    shapes: dict[ShapeKey, ShapeEstimate] = field(default_factory=dict)
    fixes: dict[tuple[Workload, float, int, int], str] = field(default_factory=dict)
    smallest: dict[tuple[Workload, float, str], ShapeEstimate | None] = field(default_factory=dict)
    memory: MemoryCache = field(default_factory=dict)
