"""Hand-made offers and spend records for the cost tests (no catalog needed)."""

from __future__ import annotations

from cloudgpu.catalog.offer import Offer
from cloudgpu.state.store import SpendRecord


def offer(
    provider: str,
    price_per_gpu_hour: float,
    *,
    gpu: str = "H100-SXM",
    count: int = 8,
    market: str = "on_demand",
    instance_type: str = "",
    region: str = "us-east-1",
) -> Offer:
    return Offer(
        provider=provider,
        instance_type=instance_type or f"{provider}-{gpu}-x{count}",
        region=region,
        zone="",
        market=market,
        gpu=gpu,
        gpu_count=count,
        gpu_memory_gb=80.0,
        vcpus=96.0,
        memory_gb=1024.0,
        price_per_hour=price_per_gpu_hour * count,
        price_source="test:hand-made",
        observed_at="2026-11-30T00:00:00Z",
    )


# REFERENCE.md section 2 price levels for 8x H100 SXM (USD per GPU-hour).
REFERENCE_OFFERS = [
    offer("aws", 6.88, instance_type="p5.48xlarge"),
    offer("aws", 3.10, market="spot", instance_type="p5.48xlarge"),
    offer("azure", 12.29, instance_type="Standard_ND96isr_H100_v5"),
    offer("gcp", 10.98, instance_type="a3-highgpu-8g"),
    offer("runpod", 3.99, instance_type="8x H100 SXM secure"),
    offer("runpod", 2.69, market="spot", instance_type="8x H100 SXM community"),
    offer("runpod", 4.50, instance_type="8x H100 SXM other"),  # not the cheapest: dropped
    offer("runpod", 2.49, gpu="A100-80GB", instance_type="8x A100"),  # other GPU
    offer("runpod", 2.79, count=1, instance_type="1x H100 SXM"),  # other count
]


def spend(
    instance_id: str,
    job_id: str,
    *,
    provider: str = "aws",
    gpu: str = "H100-SXM",
    gpu_count: int = 8,
    price_per_hour: float = 55.04,
    started_at: float = 1_764_547_200.0,  # 2025-12-01T00:00:00Z
    hours: float = 10.0,
    market: str = "on_demand",
) -> SpendRecord:
    seconds = hours * 3600.0
    return SpendRecord(
        instance_id=instance_id,
        job_id=job_id,
        provider=provider,
        instance_type=f"{provider}-type",
        region="us-east-1",
        market=market,
        gpu=gpu,
        gpu_count=gpu_count,
        price_per_hour=price_per_hour,
        started_at=started_at,
        ended_at=started_at + seconds,
        billed_seconds=seconds,
        cost=price_per_hour * seconds / 3600.0,
    )
