"""Small builders shared by the catalog tests."""

from __future__ import annotations

from typing import Any

from cloudgpu.catalog.offer import Offer


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = dict(
        provider="aws",
        instance_type="p5.48xlarge",
        region="us-east-1",
        zone="use1-az1",
        market="on_demand",
        gpu="H100-SXM",
        gpu_count=8,
        gpu_memory_gb=80.0,
        vcpus=192.0,
        memory_gb=2048.0,
        price_per_hour=55.04,
        nvme_count=8,
        nvme_size_gb=3800.0,
        observed_at="2026-11-30T12:00:00Z",
        price_source="test",
    )
    base.update(kw)
    return Offer(**base)
