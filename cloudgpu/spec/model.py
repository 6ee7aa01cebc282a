"""The parsed job: plain dataclasses produced by cloudgpu.spec's parser/validator.

The planner reads ``resources`` and ``workload``; the lifecycle reads the rest. The
``workload`` block is kept as a validated mapping here and interpreted by
cloudgpu.planner (which owns its vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuRequest:
    """``gpu: A100-80GB:8`` / ``H100:4+`` / ``H100`` / ``24GB+`` / ``any``."""

    name: str | None = None  # user's GPU name or family (None: any GPU)
    count: int | None = None  # None: any count (the planner may choose)
    count_at_least: bool = False  # "H100:4+": at least ``count``
    min_memory_gb: float | None = None  # from "24GB+"
    any_gpu: bool = False  # "any"
    cpu_only: bool = False  # gpu: none / 0 (CPU-only jobs, e.g. the local quickstart)


@dataclass(frozen=True)
class Resources:
    gpu: GpuRequest = field(default_factory=GpuRequest)
    cpus: float | None = None  # minimum vCPUs ("16+")
    memory_gb: float | None = None  # minimum RAM ("128GB+")
    local_nvme_gb: float | None = None  # minimum local NVMe ("500GB+")
    spot: str = "auto"  # "true" | "false" | "auto"
    max_price: float | None = None  # USD per instance-hour
    providers: tuple[str, ...] = ()  # empty: every enabled provider
    regions: tuple[str, ...] = ()  # glob patterns; empty: any
    disk_gb: int = 100
    image: str | None = None
    retry_s: float | None = None  # keep retrying the ranked list this long on no capacity


@dataclass(frozen=True)
class DataItem:
    src: str  # local path, or s3:// gs:// az:// https:// (cloudgpu.data.uri)
    dst: str  # path on the instance (usually under /nvme)
    exclude: tuple[str, ...] = ()  # gitignore-style patterns (cloudgpu.data.select)
    pack: bool = False  # local trees: shards for transfer, unpacked on the instance
    workers: int | None = None  # remote sources: parallel fetches on the instance


@dataclass(frozen=True)
class OutputItem:
    src: str  # path on the instance
    dst: str  # local path
    all_nodes: bool = False  # multi-node: from every node into dst/node-R (else rank 0's)

    def for_node(self, rank: int) -> OutputItem:
        """This output as node ``rank`` brings it back: into its own ``node-R`` folder."""
        return OutputItem(self.src, f"{self.dst.rstrip('/')}/node-{rank}")


@dataclass(frozen=True)
class Limits:
    max_runtime_s: float | None = None
    max_cost: float | None = None  # USD for the whole job
    idle_timeout_s: float | None = None
    max_preemptions: int | None = None  # None: the configured default


@dataclass(frozen=True)
class JobSpec:
    name: str
    resources: Resources = field(default_factory=Resources)
    workload: dict[str, Any] | None = None
    data: tuple[DataItem, ...] = ()
    setup: str = ""
    run: str = ""
    outputs: tuple[OutputItem, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    checkpoint: str | None = None
    checkpoint_every_s: float = 300.0  # synced back this often while the job runs
    checkpoint_dst: str | None = None  # s3:// gs:// az://: kept there instead of locally
    num_nodes: int = 1  # nodes, or the fewest of a range ("1-4")
    max_nodes: int = 1  # the most of a range; == num_nodes when fixed

    @property
    def node_counts(self) -> range:
        """The node counts the planner may choose among."""
        return range(self.num_nodes, max(self.num_nodes, self.max_nodes) + 1)

    source: str = ""  # the file it came from (for messages)
    base_dir: str = ""  # directory relative local paths resolve against
