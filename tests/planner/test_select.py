"""plan() without a workload: the resources block filters and hourly price ranks."""

from __future__ import annotations

import pytest

from cloudgpu.catalog import load_registry
from cloudgpu.errors import CatalogError
from cloudgpu.planner import plan
from cloudgpu.spec.model import GpuRequest
from tests.planner.helpers import MARKET, job, offer

REG = load_registry()


def _types(**resources: object) -> list[str]:
    p = plan(job(None, **resources), MARKET, registry=REG)
    return [f"{c.offer.provider}/{c.offer.instance_type}/{c.offer.market}" for c in p.candidates]


def _reasons(**resources: object) -> dict[str, str]:
    p = plan(job(None, **resources), MARKET, registry=REG)
    return {f"{c.offer.instance_type}/{c.offer.market}": c.reason for c in p.rejected}


def test_no_workload_ranks_every_offer_by_hourly_price() -> None:
    p = plan(job(None), MARKET, registry=REG, objective="cheapest")
    prices = [c.price_per_hour for c in p.candidates]
    assert prices == sorted(prices)
    assert len(p.candidates) == len(MARKET)  # `gpu:` omitted: any machine will do
    assert "ranked by $/hour" in p.summary
    assert all(c.est_cost is None for c in p.candidates)
    any_gpu = plan(job(None, gpu=GpuRequest(any_gpu=True)), MARKET, registry=REG)
    assert len(any_gpu.candidates) == len(MARKET) - 1  # the CPU-only machine has no GPU
    assert any_gpu.rejected[0].reason == "no GPU"


def test_family_name_matches_every_variant() -> None:
    got = _types(gpu=GpuRequest(name="A100"))
    assert got == [
        "runpod/1x_A100-80GB/on_demand",
        "azure/Standard_NC24ads_A100_v4/on_demand",
        "gcp/a2-ultragpu-1g/on_demand",
        "runpod/8x_A100-80GB/on_demand",
        "aws/p4d.24xlarge/on_demand",
    ]
    assert _types(gpu=GpuRequest(name="A100-80GB-PCIe")) == [
        "azure/Standard_NC24ads_A100_v4/on_demand"
    ]
    assert _reasons(gpu=GpuRequest(name="H100"))["g4dn.xlarge/on_demand"] == "GPU not H100 (T4)"


def test_unknown_gpu_name_is_a_catalog_error() -> None:
    with pytest.raises(CatalogError, match="unknown GPU 'H1000'"):
        plan(job(None, gpu=GpuRequest(name="H1000")), MARKET, registry=REG)


def test_count_memory_cpu_ram_nvme_floors() -> None:
    assert _types(gpu=GpuRequest(name="H100", count=8)) == [
        "aws/p5.48xlarge/spot",
        "aws/p5.48xlarge/on_demand",
    ]
    assert all(
        "A100" in t or "H100" in t or "p5" in t or "p4d" in t or "a2" in t
        for t in _types(gpu=GpuRequest(min_memory_gb=80))
    )
    got = _reasons(gpu=GpuRequest(min_memory_gb=48))
    assert got["g4dn.xlarge/on_demand"] == "GPU memory < 48 GB (16)"
    assert got["1x_RTX4090/on_demand"] == "GPU memory < 48 GB (24)"
    assert "p5.48xlarge/on_demand" not in _reasons(cpus=96, memory_gb=900)
    assert _reasons(cpus=96)["g6e.xlarge/on_demand"] == "vCPUs < 96 (12)"
    assert _reasons(memory_gb=500)["g6e.xlarge/on_demand"] == "RAM GB < 500 (120)"
    assert _types(local_nvme_gb=10000) == [
        "aws/p4d.24xlarge/on_demand",
        "aws/p5.48xlarge/spot",
        "aws/p5.48xlarge/on_demand",
    ]


def test_spot_true_false_auto() -> None:
    assert all(t.endswith("/spot") for t in _types(spot="true"))
    assert all(t.endswith("/on_demand") for t in _types(spot="false"))
    assert len(_types(spot="auto")) == len(MARKET)
    assert _reasons(spot="true")["g6e.xlarge/on_demand"] == "on-demand; job wants spot"


def test_max_price_providers_and_region_globs() -> None:
    assert _types(max_price=2.0) == [
        "local/local/on_demand",
        "runpod/1x_RTX4090/on_demand",
        "aws/g4dn.xlarge/on_demand",
        "runpod/1x_A100-80GB/on_demand",
        "runpod/2x_L40S/on_demand",
        "aws/g6e.xlarge/on_demand",
    ]
    assert _reasons(max_price=2.0)["p5.48xlarge/on_demand"] == ("price > max_price $2/h ($55.04/h)")
    assert {t.split("/")[0] for t in _types(providers=("runpod", "gcp"))} == {"runpod", "gcp"}
    assert {t.split("/")[1] for t in _types(regions=("us-west-*", "us-central*"))} == {
        "g6e.12xlarge",
        "a2-ultragpu-1g",
    }
    assert _reasons(regions=("eu*",))["g6e.xlarge/on_demand"] == ("region not in eu* (us-east-1)")


def test_cpu_only_job_takes_the_gpu_less_offer() -> None:
    p = plan(job(None, gpu=GpuRequest(cpu_only=True)), MARKET, registry=REG)
    assert [c.offer.provider for c in p.candidates] == ["local"]
    assert p.rejected[0].reason.startswith("CPU-only job; offer has GPUs")


def test_accelerators_are_not_gpus_unless_named() -> None:
    inf2 = offer("aws", "inf2.xlarge", "Inferentia2", 1, 32, 0.76)
    p = plan(job(None, gpu=GpuRequest(any_gpu=True)), [inf2], registry=REG)
    assert not p.candidates and p.rejected[0].reason.startswith("not a GPU")
    named = plan(job(None, gpu=GpuRequest(name="Inferentia2")), [inf2], registry=REG)
    assert len(named.candidates) == 1
