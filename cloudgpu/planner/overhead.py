"""Everything a job pays for besides compute: startup, data staging, data stalls, spot
interruptions.

Defaults and their grounds (all are assumptions a user can override or the state store
replaces with measurements):
- Startup (boot + image + setup) per provider, seconds: each provider's own typical
  figure (Capabilities.startup_s, declared by the plugin, handed in as ``default_of``);
  replaced by the median of the user's own past launches when the store has any
  (StartupHistory.from_store).
- Staging: data moves at the slowest of the source (assumed 10 Gbit/s unless the offer's
  network is slower), 80% of the offer's network, and the write rate of the destination
  (local NVMe ~1.5 GB/s per device for writes, a network disk ~0.25 GB/s).
- Data stalls (REFERENCE.md section 5): required read rate = samples/s x bytes/sample x
  GPUs; stall = max(0, 1 - supply/required); effective time = time / (1 - stall). NVMe
  reads at ~2.7 GB/s per device (AWS p4d instance store), a network disk at 0.25 GB/s,
  CPUs at vcpus x cpu_samples_per_s when the workload states a decode rate.
- Spot: interruptions arrive at spot_interruptions_per_hour (default 0.05/h, assumption:
  roughly the AWS Spot Instance Advisor's "<5%" band read per hour for scarce GPU types);
  each one loses half a checkpoint interval of work and a fresh startup.

This module only does arithmetic on numbers given to it and reads the store it is
handed; it must not pick or rank offers.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cloudgpu.state.store import InstanceRecord, Store

FALLBACK_STARTUP_S = 300.0  # a provider that declares nothing: a VM reachable in minutes
SOURCE_GBPS = 10.0  # Gbit/s the data source is assumed to deliver
NVME_WRITE_GBS = 1.5
NVME_READ_GBS = 2.7
DISK_GBS = 0.25


@dataclass(frozen=True)
class StartupHistory:
    """Measured startup seconds per provider (create call -> instance ready)."""

    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # The provider's own typical startup when there are no samples (its capabilities).
    default_of: Callable[[str], float] = field(default=lambda name: FALLBACK_STARTUP_S)

    def with_defaults(self, default_of: Callable[[str], float]) -> StartupHistory:
        return StartupHistory(self.samples, default_of)

    @classmethod
    def from_instances(cls, records: Iterable[InstanceRecord], last: int = 20) -> StartupHistory:
        """From instance records: ``launched_at - created_at`` of the ``last`` launches."""
        by_provider: dict[str, list[tuple[float, float]]] = {}
        for rec in records:
            if rec.launched_at is None or rec.launched_at < rec.created_at:
                continue
            by_provider.setdefault(rec.provider, []).append(
                (rec.created_at, rec.launched_at - rec.created_at)
            )
        return cls(
            {p: tuple(d for _, d in sorted(rows)[-last:]) for p, rows in by_provider.items()}
        )

    @classmethod
    def from_store(cls, store: Store, last: int = 20) -> StartupHistory:
        return cls.from_instances(store.instances(), last)

    def startup_s(self, provider: str) -> float:
        seen = self.samples.get(provider)
        if seen:
            return float(statistics.median(seen))
        return float(self.default_of(provider))

    def is_measured(self, provider: str) -> bool:
        return bool(self.samples.get(provider))


def staging_hours(data_bytes: float, network_gbps: float, nvme_count: int) -> float:
    """Hours to copy ``data_bytes`` onto the instance (see module docstring)."""
    if data_bytes <= 0:
        return 0.0
    net = min(SOURCE_GBPS, network_gbps or SOURCE_GBPS) * 0.8 / 8.0  # GB/s
    write = NVME_WRITE_GBS * nvme_count if nvme_count else DISK_GBS
    return data_bytes / (min(net, write) * 1e9) / 3600.0


def stall_fraction(
    samples_per_s: float,
    bytes_per_sample: float,
    gpus: int,
    nvme_count: int,
    vcpus: float,
    cpu_samples_per_s: float,
) -> float:
    """Share of each step the GPUs wait for data (0 when nothing is stated)."""
    if samples_per_s <= 0 or bytes_per_sample <= 0 or gpus <= 0:
        return 0.0
    need_samples = samples_per_s * gpus
    read = (NVME_READ_GBS * nvme_count if nvme_count else DISK_GBS) * 1e9 / bytes_per_sample
    supply = read
    if cpu_samples_per_s > 0:
        supply = min(supply, vcpus * cpu_samples_per_s)
    return max(0.0, 1.0 - supply / need_samples)


def spot_extra_hours(
    run_hours: float, per_hour: float, checkpoint_minutes: float, startup_s: float
) -> float:
    """Expected hours lost to interruptions over a run of ``run_hours``."""
    lost_each = checkpoint_minutes / 60.0 / 2.0 + startup_s / 3600.0
    return run_hours * per_hour * lost_each
