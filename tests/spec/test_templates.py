"""The realistic job templates plan to something that fits their own limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.catalog import load_catalog, load_registry
from cloudgpu.paths import Paths
from cloudgpu.planner import plan
from cloudgpu.spec import load_job

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@pytest.mark.parametrize("name", ["finetune", "batch-inference"])
def test_template_fits_its_limits(name: str, paths: Paths) -> None:
    job = load_job(TEMPLATES / f"{name}.yaml")
    result = plan(job, load_catalog(paths, warn=None).offers, registry=load_registry())
    best = result.best
    assert best is not None, result.needs
    assert best.est_hours is not None and job.limits.max_runtime_s is not None
    assert best.est_hours * 3600 <= job.limits.max_runtime_s
    assert best.est_cost is not None and job.limits.max_cost is not None
    assert best.est_cost <= job.limits.max_cost
