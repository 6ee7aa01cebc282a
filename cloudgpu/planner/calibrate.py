"""Estimates corrected by the user's own runs: every finished job that reported its
throughput (cloudgpu.lifecycle.metrics -> the state store's runs table) is compared
with what this model estimates for the same workload on the same machine, and later
estimates for the same GPU class and model size are scaled by what the user measured.

Matching: the same GPU family (H100 with H100, whatever the variant), the same side
(training kinds with training kinds, inference with inference), and a model within
SIZE_BAND of this one's parameter count. The correction is the median of
measured / estimated over the LAST_RUNS newest matching runs, bounded to
[1/MAX_CORRECTION, MAX_CORRECTION] so one mis-reported figure cannot zero a plan.
A run whose workload no longer parses, or whose machine this model cannot time, is
left out (never an error: the history is the user's past, not this plan's input).

The store is passed in; this module reads it and does arithmetic.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from cloudgpu.catalog.gpus import GpuRegistry, GpuSpec, usable_gib
from cloudgpu.errors import CloudGPUError
from cloudgpu.planner.fit import Shape, estimate_shape
from cloudgpu.planner.workload import Workload, parse_workload
from cloudgpu.state import runs as run_store
from cloudgpu.state.runs import RunRecord
from cloudgpu.state.store import Store

SIZE_BAND = 1.5  # a model within 1.5x the parameters counts as "the same size"
LAST_RUNS = 20
MAX_CORRECTION = 10.0


@dataclass(frozen=True)
class Calibration:
    factor: float  # measured speed / this model's estimate (median)
    runs: int
    family: str

    def describe(self) -> str:
        s = "" if self.runs == 1 else "s"
        return (
            f"calibrated from {self.runs} run{s} on {self.family}: measured speed "
            f"{self.factor:.2f}x the model's"
        )


def estimated_tokens_per_s(w: Workload, hours: float) -> float:
    """The throughput an estimate of ``hours`` implies, as jobs report it (module doc of
    cloudgpu.lifecycle.metrics): trained tokens/s, or generated tokens/s."""
    generated = w.requests * w.output_tokens if w.requests else w.tokens
    tokens = w.tokens if w.training else generated
    return tokens / (hours * 3600.0) if hours > 0 else 0.0


@dataclass
class RunHistory:
    """The user's measured runs, and the correction each GPU family earns from them."""

    records: tuple[RunRecord, ...] = ()
    _cache: dict[tuple[str, bool, float], Calibration | None] = field(default_factory=dict)

    @classmethod
    def from_store(cls, store: Store) -> RunHistory:
        return cls(tuple(run_store.runs(store)))

    def calibration(
        self, w: Workload, spec: GpuSpec | None, registry: GpuRegistry
    ) -> Calibration | None:
        if spec is None or not self.records:
            return None
        key = (spec.family, w.training, w.arch.total_params)
        if key not in self._cache:
            self._cache[key] = self._compute(w, spec.family, registry)
        return self._cache[key]

    def _compute(self, w: Workload, family: str, registry: GpuRegistry) -> Calibration | None:
        ratios = list(self._ratios(self._matching(w, family, registry), registry))[-LAST_RUNS:]
        if not ratios:
            return None
        factor = statistics.median(ratios)
        factor = min(MAX_CORRECTION, max(1.0 / MAX_CORRECTION, factor))
        return Calibration(factor, len(ratios), family)

    def _matching(
        self, w: Workload, family: str, registry: GpuRegistry
    ) -> Iterable[tuple[RunRecord, Workload, GpuSpec]]:
        for rec in self.records:
            spec = registry.spec(rec.gpu)
            if spec is None or spec.family != family:
                continue
            try:
                past = parse_workload(rec.workload)
            except (CloudGPUError, TypeError, ValueError):
                continue  # written by another version, or edited by hand
            if past.training != w.training:
                continue
            size = past.arch.total_params / w.arch.total_params
            if abs(math.log(size)) <= math.log(SIZE_BAND):
                yield rec, past, spec

    @staticmethod
    def _ratios(
        matched: Iterable[tuple[RunRecord, Workload, GpuSpec]], registry: GpuRegistry
    ) -> Iterable[float]:
        for rec, past, spec in matched:
            shape = Shape(usable_gib(0.0, spec), rec.gpu_count, rec.num_nodes, rec.network_gbps)
            est = estimate_shape(past, shape, spec)
            if not est.fits or not est.hours:
                continue
            expected = estimated_tokens_per_s(past, est.hours)
            if expected > 0:
                yield rec.tokens_per_s / expected
