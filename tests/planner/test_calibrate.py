"""Estimates corrected by the user's measured runs: same GPU family and model size only,
the median ratio, bounded, shown on the candidate."""

from __future__ import annotations

from typing import Any

import pytest

from cloudgpu.catalog import load_registry
from cloudgpu.planner import RunHistory, plan
from cloudgpu.planner.calibrate import estimated_tokens_per_s
from cloudgpu.planner.fit import Shape, estimate_shape
from cloudgpu.planner.workload import parse_workload
from cloudgpu.state import runs
from cloudgpu.state.runs import RunRecord
from cloudgpu.state.store import Store
from tests.planner.helpers import job, offer

REG = load_registry()
LORA_8B = {"kind": "lora", "model": "llama-3-8b", "tokens": "1B"}
H100 = offer("aws", "p5", "H100-SXM", 8, 80, 40.0, network_gbps=3200)
A100 = offer("gcp", "a2", "A100-80GB-SXM", 8, 80, 30.0, network_gbps=800)


def _estimate(workload: dict[str, Any], gpu: str, count: int) -> float:
    w = parse_workload(workload)
    spec = REG.require(gpu)
    est = estimate_shape(w, Shape(spec.memory_gb, count, 1, 0.0), spec)
    assert est.hours is not None
    return estimated_tokens_per_s(w, est.hours)


def _run(workload: dict[str, Any], gpu: str, count: int, speed: float, at: float) -> RunRecord:
    """A run that went at ``speed`` x what the model estimates for it."""
    return RunRecord(
        job_id=f"j{at}",
        provider="sim",
        instance_type="x",
        gpu=gpu,
        gpu_count=count,
        tokens_per_s=speed * _estimate(workload, gpu, count),
        source="stdout",
        recorded_at=at,
        workload=workload,
    )


def test_measured_runs_scale_later_estimates_for_the_same_gpu_family_and_size() -> None:
    base = plan(job(LORA_8B), [H100, A100], registry=REG)
    history = RunHistory(
        (
            _run(LORA_8B, "H100-SXM", 1, 0.5, 1),  # a 1-GPU run counts for 8-GPU machines
            _run({**LORA_8B, "model": "llama-3.1-8b"}, "H100-SXM", 8, 0.6, 2),
            _run(LORA_8B, "H100-PCIe", 1, 0.4, 3),  # same family, another variant
        )
    )
    got = plan(job(LORA_8B), [H100, A100], registry=REG, runs=history)
    by = {c.offer.gpu: c for c in got.candidates}
    was = {c.offer.gpu: c for c in base.candidates}
    h = by["H100-SXM"]
    assert h.calibration.startswith("calibrated from 3 runs on H100: measured speed 0.50x")
    compute_now = h.est_hours - h.startup_hours - h.staging_hours - h.spot_penalty_hours  # type: ignore[operator]
    w = was["H100-SXM"]
    compute_was = w.est_hours - w.startup_hours - w.staging_hours - w.spot_penalty_hours  # type: ignore[operator]
    assert compute_now == pytest.approx(compute_was / 0.5, rel=1e-6)
    assert by["A100-80GB-SXM"].calibration == ""  # another family: untouched
    assert by["A100-80GB-SXM"].est_hours == was["A100-80GB-SXM"].est_hours


def test_other_sizes_and_the_other_side_do_not_count() -> None:
    history = RunHistory(
        (
            _run({**LORA_8B, "model": "llama-3-70b"}, "H100-SXM", 8, 0.3, 1),  # 9x larger
            _run({"kind": "lora", "params": "1B", "tokens": "1B"}, "H100-SXM", 1, 0.3, 2),
            _run(
                {"kind": "inference", "model": "llama-3-8b", "requests": 1000},
                "H100-SXM",
                1,
                0.3,
                3,
            ),
        )
    )
    got = plan(job(LORA_8B), [H100], registry=REG, runs=history)
    assert got.best is not None and got.best.calibration == ""


def test_a_wild_figure_is_bounded_and_unparseable_history_is_skipped() -> None:
    wild = _run(LORA_8B, "H100-SXM", 1, 1e6, 1)
    broken = RunRecord("j", "sim", "x", "H100-SXM", 1, 100.0, "file", 2, {"kind": "nonsense"})
    unknown_gpu = RunRecord("k", "sim", "x", "Mystery-9", 1, 100.0, "file", 3, LORA_8B)
    history = RunHistory((wild, broken, unknown_gpu))
    got = plan(job(LORA_8B), [H100], registry=REG, runs=history)
    assert got.best is not None
    assert got.best.calibration.startswith("calibrated from 1 run on H100: measured speed 10.00x")


def test_history_round_trips_through_the_state_store(tmp_path: Any) -> None:
    store = Store.open(tmp_path / "state.db")
    runs.record(store, _run(LORA_8B, "H100-SXM", 1, 0.8, 1))
    history = RunHistory.from_store(store)
    store.close()
    got = plan(job(LORA_8B), [H100], registry=REG, runs=history)
    assert got.best is not None and "0.80x" in got.best.calibration
