"""Small hand-made offers and jobs for planner tests (real Offer/JobSpec types, the real
bundled GPU registry)."""

from __future__ import annotations

from typing import Any

from cloudgpu.catalog import Offer
from cloudgpu.spec.model import GpuRequest, JobSpec, Limits, Resources


def offer(
    provider: str,
    instance_type: str,
    gpu: str,
    count: int,
    memory_gb: float,
    price: float,
    *,
    market: str = "on_demand",
    region: str = "us-east-1",
    network_gbps: float = 100.0,
    nvme: int = 0,
    vcpus: float | None = None,
    ram_gb: float | None = None,
) -> Offer:
    return Offer(
        provider=provider,
        instance_type=instance_type,
        region=region,
        zone="",
        market=market,
        gpu=gpu,
        gpu_count=count,
        gpu_memory_gb=memory_gb,
        vcpus=vcpus if vcpus is not None else 12.0 * max(count, 1),
        memory_gb=ram_gb if ram_gb is not None else 120.0 * max(count, 1),
        price_per_hour=price,
        nvme_count=nvme,
        nvme_size_gb=3800.0 if nvme else 0.0,
        network_gbps=network_gbps,
    )


# A small market with the shapes that make ranking interesting: a cheap slow GPU, fast
# expensive nodes, spot and on-demand twins, PCIe and NVLink, a CPU-only machine.
MARKET = [
    offer("aws", "p5.48xlarge", "H100-SXM", 8, 80, 55.04, network_gbps=3200, nvme=8),
    offer("aws", "p5.48xlarge", "H100-SXM", 8, 80, 24.0, market="spot", network_gbps=3200, nvme=8),
    offer("aws", "p4d.24xlarge", "A100-40GB-SXM", 8, 40, 21.96, network_gbps=400, nvme=8),
    offer("aws", "g6e.xlarge", "L40S", 1, 48, 1.861),
    offer("aws", "g6e.12xlarge", "L40S", 4, 48, 10.49, region="us-west-2"),
    offer("aws", "g4dn.xlarge", "T4", 1, 16, 0.526, nvme=1),
    offer("gcp", "a2-ultragpu-1g", "A100-80GB-SXM", 1, 80, 5.07, region="us-central1"),
    offer("runpod", "1x_H100_SXM", "H100-SXM", 1, 80, 2.69, region="CA"),
    offer("runpod", "1x_A100-80GB", "A100-80GB-SXM", 1, 80, 1.39, region="CA"),
    offer("runpod", "8x_A100-80GB", "A100-80GB-SXM", 8, 80, 11.12, region="CA"),
    offer("runpod", "2x_L40S", "L40S", 2, 48, 1.58, region="CZ"),
    offer("runpod", "1x_RTX4090", "RTX4090", 1, 24, 0.34, region="CZ"),
    offer("azure", "Standard_NC24ads_A100_v4", "A100-80GB-PCIe", 1, 80, 3.67, region="eastus"),
    offer("local", "local", "", 0, 0, 0.0, region="local", vcpus=2, ram_gb=8),
]


def job(workload: dict[str, Any] | None = None, **resources: Any) -> JobSpec:
    gpu = resources.pop("gpu", GpuRequest())
    max_cost = resources.pop("max_cost", None)
    max_runtime_s = resources.pop("max_runtime_s", None)
    num_nodes = resources.pop("num_nodes", 1)
    return JobSpec(
        name="t",
        resources=Resources(gpu=gpu, **resources),
        workload=workload,
        limits=Limits(max_cost=max_cost, max_runtime_s=max_runtime_s),
        num_nodes=num_nodes,
    )
