"""Offers from ``sinfo``: one per partition, node shape and GPU count that fits a node.

A node shape (CPUs, memory, GPU GRES type and count, local scratch) becomes offers for
1, 2, 4, ... of its GPUs and the whole node, each with its share of CPUs, memory and
scratch, priced at the configured $/GPU-hour (CPU-only partitions: $/CPU-hour). The
instance type spells the request the way Slurm does, ``PARTITION:TYPE:COUNT``
(``gpu:a100:4``; ``cpu:cpu:32`` for a CPU-only node), and ``extra`` carries what sbatch
needs, so create() never guesses. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cloudgpu_providers.slurm.commands import NodeRow, Shape, gpu_gres
from cloudgpu_providers.slurm.settings import Settings

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer

NAME = "slurm"
MIB_GB = 1.048576 / 1000  # sinfo reports MiB; offers carry GB


@dataclass(frozen=True)
class _Group:
    partition: str
    cpus: int
    memory_mb: int
    tmp_mb: int
    gpu_type: str
    gpus: int


def gpu_counts(total: int) -> list[int]:
    """1, 2, 4, ... below ``total``, then ``total`` itself."""
    out, n = [], 1
    while n < total:
        out.append(n)
        n *= 2
    return [*out, total]


def _groups(rows: Sequence[NodeRow]) -> dict[_Group, list[NodeRow]]:
    groups: dict[_Group, list[NodeRow]] = {}
    for row in rows:
        if not row.usable:
            continue
        kinds = gpu_gres(row.gres) or [("cpu", 0)]
        for gtype, count in kinds:
            key = _Group(row.partition, row.cpus, row.memory_mb, row.tmp_mb, gtype, count)
            groups.setdefault(key, []).append(row)
    return groups


def offers_from_sinfo(
    rows: Sequence[NodeRow], settings: Settings, registry: GpuRegistry, observed_at: str
) -> list[Offer]:
    out: list[Offer] = []
    for g, nodes in sorted(_groups(rows).items(), key=lambda kv: repr(kv[0])):
        part = settings.partition(g.partition)
        if part is None:
            continue
        free = sum(1 for n in nodes if n.free)
        base = {"partition": g.partition, "nodes": len(nodes), "free_nodes": free}
        if g.gpus == 0:
            price = settings.cpu_price(g.partition)
            if price is None:
                continue
            shape = Shape(g.partition, "cpu", 0, g.cpus, g.memory_mb, whole_node=True)
            out.append(_offer(g, shape, g.cpus * price, ("", 0.0, ()), settings, observed_at, base))
            continue
        gpu_price = settings.gpu_price(g.partition)
        if gpu_price is None:
            continue
        name = part.gpu or registry.canonical(g.gpu_type, part.gpu_memory_gb) or g.gpu_type
        spec = registry.spec(name)
        mem = part.gpu_memory_gb or (spec.memory_gb if spec else 0.0)
        flags = () if spec else (FLAG_UNKNOWN_GPU,)
        for k in gpu_counts(g.gpus):
            shape = Shape(
                g.partition,
                g.gpu_type,
                k,
                g.cpus * k // g.gpus,
                g.memory_mb * k // g.gpus,
                whole_node=k == g.gpus,
            )
            gpu = (name, mem, flags)
            out.append(_offer(g, shape, k * gpu_price, gpu, settings, observed_at, base))
    return out


def _offer(
    g: _Group,
    shape: Shape,
    price: float,
    gpu_info: tuple[str, float, tuple[str, ...]],  # canonical name, GB per GPU, flags
    settings: Settings,
    observed_at: str,
    base: dict[str, object],
) -> Offer:
    gpu, gpu_mem, flags = gpu_info
    share = shape.gpus / g.gpus if g.gpus else 1.0
    return Offer(
        provider=NAME,
        instance_type=f"{g.partition}:{shape.gpu_type or 'gpu'}:{shape.gpus or g.cpus}",
        region=settings.region,
        zone=g.partition,
        market="on_demand",
        gpu=gpu,
        gpu_count=shape.gpus,
        gpu_memory_gb=gpu_mem,
        vcpus=float(shape.cpus),
        memory_gb=round(shape.memory_mb * MIB_GB, 1),
        price_per_hour=round(price, 6),
        nvme_count=1 if g.tmp_mb else 0,
        nvme_size_gb=round(g.tmp_mb * MIB_GB * share, 1),
        price_source="config:providers.slurm",
        observed_at=observed_at,
        flags=flags,
        extra={
            **base,
            "gpu_type": shape.gpu_type,
            "cpus": shape.cpus,
            "memory_mb": shape.memory_mb,
            "whole_node": shape.whole_node,
        },
    )


def shape_of(offer: Offer) -> Shape:
    """The sbatch request behind an offer (from its extras, else its instance type)."""
    x = offer.extra
    partition, gtype = [*offer.instance_type.split(":"), "", ""][:2]
    return Shape(
        partition=str(x.get("partition", partition)),
        gpu_type=str(x.get("gpu_type", "" if gtype == "gpu" else gtype)),
        gpus=offer.gpu_count,
        cpus=int(x.get("cpus", offer.vcpus)),
        memory_mb=int(x.get("memory_mb", offer.memory_gb / MIB_GB)),
        whole_node=bool(x.get("whole_node", False)),
    )
