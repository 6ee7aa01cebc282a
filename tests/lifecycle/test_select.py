"""Ranking offers by hourly price and explaining what does not fit."""

from __future__ import annotations

from typing import Any

import pytest

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CatalogError
from cloudgpu.lifecycle.select import nothing_fits, rank
from cloudgpu.spec import parse_job


def offer(itype: str, gpu: str, count: int, mem: float, price: float, **kw: Any) -> Offer:
    base: dict[str, Any] = dict(
        provider="aws",
        instance_type=itype,
        region="us-east-1",
        zone="",
        market="on_demand",
        gpu=gpu,
        gpu_count=count,
        gpu_memory_gb=mem,
        vcpus=8 * max(count, 1),
        memory_gb=64 * max(count, 1),
        price_per_hour=price,
        observed_at="2026-11-01T00:00:00Z",
    )
    base.update(kw)
    return Offer(**base)


OFFERS = [
    offer("p4de", "A100-80GB-SXM", 8, 80, 27.4, nvme_count=8, nvme_size_gb=1000),
    offer("p4d", "A100-40GB-SXM", 8, 40, 21.9, nvme_count=8, nvme_size_gb=1000),
    offer("g6", "L4", 1, 24, 0.80),
    offer("g6-spot", "L4", 1, 24, 0.30, market="spot"),
    offer("cpu", "", 0, 0, 0.10),
    offer("eu-l4", "L4", 1, 24, 0.70, region="eu-west-1"),
]


def job(resources: str) -> Any:
    return parse_job(f"name: j\nrun: x\nresources: {resources}\n")


def types(resources: str) -> list[str]:
    return [o.instance_type for o in rank(job(resources), OFFERS, load_registry()).fits]


def test_ranking_by_price_with_filters() -> None:
    assert types("{gpu: L4}") == ["g6-spot", "eu-l4", "g6"]
    assert types("{gpu: L4, spot: false}") == ["eu-l4", "g6"]
    assert types("{gpu: L4, spot: true}") == ["g6-spot"]
    assert types("{gpu: L4, regions: ['us-*']}") == ["g6-spot", "g6"]
    assert types("{gpu: 24GB+:1, max_price: 0.75}") == ["g6-spot", "eu-l4"]
    assert types("{gpu: A100-80GB:8, local_nvme: 4TB+}") == ["p4de"]
    assert types("{gpu: A100:8}") == ["p4d", "p4de"]
    assert types("{gpu: none}")[0] == "cpu"
    assert types("{gpu: any:8}") == ["p4d", "p4de"]


def test_nothing_fits_names_the_closest() -> None:
    j = job("{gpu: A100-80GB:8, memory: 2TB+}")
    err = nothing_fits(j, rank(j, OFFERS, load_registry()))
    assert "closest is aws p4de" in str(err) and "RAM" in str(err)
    assert err.hint and "relax" in err.hint


def test_unknown_gpu_is_catalog_error() -> None:
    with pytest.raises(CatalogError, match="unknown GPU"):
        rank(job("{gpu: A1OO}"), OFFERS, load_registry())
