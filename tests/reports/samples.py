"""Sample reports built from hand-made data, shared by the report tests."""

from __future__ import annotations

from pathlib import Path

from cloudgpu.catalog import load_catalog, load_registry
from cloudgpu.costs import TcoInputs, analyse, hardware_for, history_rows, rent_options
from cloudgpu.costs.spend import summarize
from cloudgpu.paths import default_paths
from cloudgpu.planner import plan
from cloudgpu.reports.buyrent import buyrent_report
from cloudgpu.reports.model import Report
from cloudgpu.reports.offers import offers_report
from cloudgpu.reports.plan import plan_report
from cloudgpu.reports.spend import spend_report
from cloudgpu.spec import load_job
from tests.costs.helpers import REFERENCE_OFFERS, offer, spend

T0 = 1_764_547_200.0  # 2025-12-01T00:00:00Z
GENERATED = "2026-12-01 00:00 UTC"

OFFERS = [
    *REFERENCE_OFFERS,
    offer("aws", 0.526, gpu="T4", count=1, instance_type="g4dn.xlarge"),
    offer("aws", 0.21, gpu="T4", count=1, market="spot", instance_type="g4dn.xlarge"),
    offer("runpod", 0.79, gpu="L40S", count=1, instance_type="1x L40S"),
    offer("aws", 1.861, gpu="L40S", count=1, instance_type="g6e.xlarge"),
    offer("aws", 3.43, gpu="A100-80GB", count=8, instance_type="p4de.24xlarge"),
    offer("azure", 3.67, gpu="A100-80GB", count=1, instance_type="NC24ads_A100_v4"),
]
TFLOPS = {"H100-SXM": 989.0, "A100-80GB": 312.0, "L40S": 362.0, "T4": 65.0}
SPEND = [
    spend("i-1", "train-llama", hours=10, started_at=T0),
    spend(
        "i-2",
        "train-llama",
        provider="runpod",
        price_per_hour=21.52,
        hours=5.5,
        started_at=T0 + 20 * 3600,
    ),
    spend(
        "i-3",
        "eval",
        provider="runpod",
        gpu="A100-80GB",
        gpu_count=1,
        price_per_hour=1.39,
        hours=0.333,
        started_at=T0 + 86400,
    ),
    spend(
        "i-4", "sweep", provider="gcp", price_per_hour=87.84, hours=1 / 3, started_at=T0 + 2 * 86400
    ),
    spend(
        "i-5",
        "sweep",
        provider="aws",
        market="spot",
        price_per_hour=24.8,
        hours=7,
        started_at=T0 + 3 * 86400 + 3600,
    ),
]


def buyrent_sample(with_history: bool = True) -> Report:
    inputs = TcoInputs(utilization=0.6)
    hw = hardware_for("H100-SXM", 8, 30000.0, 700.0, inputs)
    result = analyse(hw, inputs, rent_options(REFERENCE_OFFERS, "H100-SXM", 8, inputs))
    history = None
    if with_history:
        rows = history_rows(SPEND, 30.0, {"H100-SXM": hw}, inputs)
        history = (rows, 30.0)
    return buyrent_report(result, "test:hand-made", "2026-11-30", GENERATED, history)


def offers_sample() -> Report:
    return offers_report(OFFERS, TFLOPS, GENERATED)


def spend_sample() -> Report:
    return spend_report(summarize(SPEND, None, now=T0 + 10 * 86400), GENERATED)


def _bundled_catalog():  # type: ignore[no-untyped-def]
    """The bundled snapshot only (no cache of any home can leak in)."""
    return load_catalog(default_paths({"CLOUDGPU_HOME": "/nonexistent-cloudgpu"}), warn=None)


def crowded_offers_sample() -> Report:
    """Every GPU of the bundled catalog: long labels, dozens of close scatter points."""
    catalog = _bundled_catalog()
    registry = load_registry()
    tflops = {s.name: s.bf16_tflops for s in registry.all() if s.bf16_tflops}
    return offers_report(catalog.offers, tflops, GENERATED, is_stale=catalog.is_stale)


def plan_sample() -> Report:
    """The finetune template planned over the bundled catalog (a wide candidates table)."""
    job = load_job(Path(__file__).resolve().parents[2] / "templates" / "finetune.yaml")
    result = plan(job, _bundled_catalog().offers, registry=load_registry())
    return plan_report(result, job.name, GENERATED)
