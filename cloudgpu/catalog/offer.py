"""The normalized Offer: one rentable machine shape at one place and market.

Every provider's prices, bundled or refreshed, become Offers. The record is flat and
slotted because the catalog holds tens of thousands of them (and the scale benchmark a
million); derived columns are properties, not stored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

Market = Literal["on_demand", "spot"]
MARKETS: tuple[str, ...] = ("on_demand", "spot")

# Flags an offer can carry; each says what the normalizer noticed and did on purpose.
FLAG_UNKNOWN_GPU = "unknown_gpu"  # the provider's GPU name mapped to no known spec; kept as-is
FLAG_SPOT_ABOVE_ON_DEMAND = "spot_above_on_demand"  # published spot > on-demand; kept, flagged
FLAG_PRICE_PREDATES_CUT = "price_predates_cut"  # AWS P-family price from before the 2025 cut
FLAG_GPU_COUNT_CORRECTED = "gpu_count_corrected"  # table disagreed with documented size
FLAG_GPU_MEMORY_CORRECTED = "gpu_memory_corrected"
FLAG_FRACTIONAL_GPU = "fractional_gpu"  # a share of one GPU (Azure NV*as_v4, NV*ads_A10_v5)
FLAG_STALE = "stale"  # not stored on offers: the catalog decides it from observed_at
# No charge within a quota and session limit (Kaggle, Colab's free tier); ``extra`` holds
# session_hours and weekly_quota_hours (0 = not published). Chosen only when the job's
# resources.providers names the provider.
FLAG_FREE_TIER = "free_tier"

# What each price-related flag means, as a report says it next to the price.
PRICE_FLAG_TEXT = {
    FLAG_STALE: "stale price",
    FLAG_SPOT_ABOVE_ON_DEMAND: "spot above on-demand",
    FLAG_PRICE_PREDATES_CUT: "predates a price cut",
}


def iso_utc(ts: float) -> str:
    """Unix seconds as the ISO 8601 UTC form every ``observed_at`` uses
    (``2026-12-01T02:44:00Z``)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Offer:
    provider: str
    instance_type: str
    region: str
    zone: str  # "" when the provider prices per region only
    market: str  # "on_demand" | "spot"
    gpu: str  # canonical GPU name (or the provider's raw name when FLAG_UNKNOWN_GPU)
    gpu_count: int
    gpu_memory_gb: float  # per GPU
    vcpus: float
    memory_gb: float
    price_per_hour: float  # USD per instance-hour
    nvme_count: int = 0
    nvme_size_gb: float = 0.0  # per device
    network_gbps: float = 0.0  # instance network bandwidth, 0 = unknown
    price_source: str = ""  # e.g. "snapshot:skypilot-catalog@001367d" or "aws:pricing-api"
    observed_at: str = ""  # ISO 8601 UTC, when the price was observed
    flags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def nvme_gb(self) -> float:
        return self.nvme_count * self.nvme_size_gb

    @property
    def price_per_gpu_hour(self) -> float:
        return self.price_per_hour / self.gpu_count if self.gpu_count else self.price_per_hour

    @property
    def total_gpu_memory_gb(self) -> float:
        return self.gpu_memory_gb * self.gpu_count

    @property
    def price_per_gb_hour(self) -> float:
        """USD per GB of GPU memory per hour."""
        mem = self.total_gpu_memory_gb
        return self.price_per_hour / mem if mem else float("inf")

    def gpu_share(self, full_gpu_memory_gb: float | None) -> float:
        """The part of one GPU a fractional offer rents (its memory over the whole GPU's,
        e.g. 2 of 16 GB = 1/8); 1.0 for every other offer."""
        if FLAG_FRACTIONAL_GPU not in self.flags or not full_gpu_memory_gb:
            return 1.0
        return min(1.0, self.gpu_memory_gb / full_gpu_memory_gb)

    def price_per_pflop_hour(
        self, bf16_tflops_per_gpu: float | None, full_gpu_memory_gb: float | None = None
    ) -> float | None:
        """USD per dense BF16 PFLOP-hour, given the GPU's dense BF16 TFLOPS (and its full
        memory, so a fractional offer is charged for the compute it really gets)."""
        if not bf16_tflops_per_gpu or not self.gpu_count:
            return None
        tflops = bf16_tflops_per_gpu * self.gpu_share(full_gpu_memory_gb) * self.gpu_count
        return self.price_per_hour / (tflops / 1000.0)

    @property
    def key(self) -> str:
        """Stable identity of the offer (provider/type/region/zone/market)."""
        return "/".join(
            (self.provider, self.instance_type, self.region, self.zone or "-", self.market)
        )

    def observed_datetime(self) -> datetime | None:
        if not self.observed_at:
            return None
        dt = datetime.fromisoformat(self.observed_at.replace("Z", "+00:00"))
        return dt if dt.tzinfo else dt.replace(tzinfo=UTC)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_offer(o: Offer) -> str:
    """One line naming an offer, as launch and provisioning print it."""
    gpu = f"{o.gpu}:{o.gpu_count}" if o.gpu_count else "no GPU"
    where = f"{o.region}/{o.zone}" if o.zone else o.region
    return (
        f"{o.provider} {o.instance_type} ({where}, {o.market}; {gpu}, {o.vcpus:g} vCPU, "
        f"{o.memory_gb:g} GB) ${o.price_per_hour:.2f}/h"
    )
