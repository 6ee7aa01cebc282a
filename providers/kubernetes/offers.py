"""Offers from the cluster's Node objects (core/v1 Node, as `list_node` returns them).

A GPU node's shape comes from ``status.allocatable`` (``nvidia.com/gpu``, cpu, memory,
ephemeral-storage) and its labels: the GPU model from NVIDIA GPU feature discovery
(``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` in MiB), the machine from
``node.kubernetes.io/instance-type``, place from ``topology.kubernetes.io/region`` and
``zone``, spot capacity from the clouds' own node labels. Nodes of one shape become
offers for 1, 2, 4, ... of their GPUs and the whole node (a pod asks for that many),
each with its share of CPU, memory and ephemeral storage. Priced at the configured
$/GPU-hour, else at the instance type's price in the catalog (per GPU, times the GPUs
asked for); an unpriced shape is not offered. ``extra`` carries the node selector and
the requests create() puts in the pod. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer

NAME = "kubernetes"
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
GPU_MEMORY = "nvidia.com/gpu.memory"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
REGION = "topology.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
# label -> value meaning "spot/preemptible capacity" (EKS, Karpenter, GKE, AKS docs).
SPOT_LABELS = {
    "eks.amazonaws.com/capacityType": "SPOT",
    "karpenter.sh/capacity-type": "spot",
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
}
_QTY = re.compile(r"^([0-9.]+(?:e[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4, "Pi": 1024.0**5,
}  # fmt: skip

PriceFn = Callable[[str, str, str], float | None]  # instance type, region, market -> $/GPU-h


def quantity(text: Any) -> float:
    """A resource quantity ("3500m", "16Gi", "2") as a number; 0 when unreadable."""
    m = _QTY.match(str(text).strip())
    if not m or m.group(2) not in _SUFFIX:
        return 0.0
    try:
        return float(m.group(1)) * _SUFFIX[m.group(2)]
    except ValueError:
        return 0.0


def gpu_counts(total: int) -> list[int]:
    out, n = [], 1
    while n < total:
        out.append(n)
        n *= 2
    return [*out, total]


def _ready(node: Mapping[str, Any]) -> bool:
    if node.get("spec", {}).get("unschedulable"):
        return False
    conds = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _market(labels: Mapping[str, str]) -> str:
    spot = any(labels.get(k, "").lower() == v.lower() for k, v in SPOT_LABELS.items())
    return "spot" if spot else "on_demand"


def _shape(node: Mapping[str, Any]) -> tuple[Any, ...]:
    labels = node.get("metadata", {}).get("labels") or {}
    alloc = node.get("status", {}).get("allocatable") or {}
    return (
        labels.get(INSTANCE_TYPE, ""),
        labels.get(PRODUCT, ""),
        int(quantity(alloc.get(GPU, 0))),
        quantity(alloc.get("cpu", 0)),
        quantity(alloc.get("memory", 0)),
        quantity(alloc.get("ephemeral-storage", 0)),
        labels.get(REGION, ""),
        labels.get(ZONE, ""),
        _market(labels),
        labels.get(GPU_MEMORY, ""),
    )


def offers_from_nodes(
    nodes: Sequence[Mapping[str, Any]],
    *,
    registry: GpuRegistry,
    cluster: str,
    observed_at: str,
    gpu_price: float | None,
    cpu_price: float | None,
    catalog_price: PriceFn,
) -> list[Offer]:
    groups: dict[tuple[Any, ...], int] = {}
    for node in nodes:
        if _ready(node):
            key = _shape(node)
            groups[key] = groups.get(key, 0) + 1
    out: list[Offer] = []
    for key, count in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        itype, product, gpus, cpu, mem, disk, region, zone, market, gmem = key
        where = {"region": region or cluster, "zone": zone, "market": market,
                 "source": "config:providers.kubernetes"}  # fmt: skip
        selector = {k: v for k, v in ((INSTANCE_TYPE, itype), (PRODUCT, product)) if v}
        base = {"node_selector": selector, "nodes": count}
        if gpus == 0:
            if cpu_price is None or cpu < 1:
                continue
            share = (int(cpu), mem, disk)
            out.append(
                _offer(f"{itype or 'node'}:cpu", ("", 0, 0.0), share, cpu_price * int(cpu),
                       where, observed_at, base)
            )  # fmt: skip
            continue
        per_gpu = gpu_price
        if per_gpu is None:
            per_gpu = catalog_price(itype, region, market)
            where = {**where, "source": f"catalog:{itype}"}
        if per_gpu is None:
            continue
        name = registry.canonical(product, quantity(gmem) / 1024 if gmem else None) or product
        spec = registry.spec(name) if name else None
        gpu_mem = quantity(gmem) / 1024 if gmem else (spec.memory_gb if spec else 0.0)
        for k in gpu_counts(gpus):
            share = (int(cpu * k // gpus), mem * k / gpus, disk * k / gpus)
            out.append(
                _offer(f"{itype or name or 'gpu'}:gpu:{k}", (name or product, k, gpu_mem), share,
                       per_gpu * k, where, observed_at, base, () if spec else (FLAG_UNKNOWN_GPU,))
            )  # fmt: skip
    return out


def _offer(
    instance_type: str,
    gpu: tuple[str, int, float],
    share: tuple[int, float, float],  # cpus, memory bytes, ephemeral storage bytes
    price: float,
    where: Mapping[str, str],
    observed_at: str,
    base: Mapping[str, Any],
    flags: tuple[str, ...] = (),
) -> Offer:
    cpus, mem, disk = share
    # Requests a little under the share: the kubelet keeps some of the allocatable back
    # for system pods (daemonsets), so asking for all of it would never schedule.
    return Offer(
        provider=NAME,
        instance_type=instance_type,
        region=where["region"],
        zone=where["zone"],
        market=where["market"],
        gpu=gpu[0],
        gpu_count=gpu[1],
        gpu_memory_gb=gpu[2],
        vcpus=float(cpus),
        memory_gb=round(mem / 1e9, 1),
        price_per_hour=round(price, 6),
        nvme_count=1 if disk else 0,
        nvme_size_gb=round(disk / 1e9, 1),
        price_source=where["source"],
        observed_at=observed_at,
        flags=flags,
        extra={
            **base,
            "requests": {
                "cpu": f"{max(100, int(cpus * 900))}m",
                "memory": f"{max(64, int(mem * 0.9 / 1024**2))}Mi",
            },
        },
    )
