"""Free tiers beside buy-vs-rent: does the utilization asked for fit a free quota?

A free tier (Kaggle, Colab) gives machines at no cost within a weekly quota of session
hours and a per-session limit. ``u`` busy hours a week of ``count`` GPUs fit a free
tier whose machine has at least ``count`` of the GPU when 168 x u hours a week are
within its quota (a machine-hour counts once, however many GPUs it has). A tier that
publishes no quota (Colab) is listed with that caveat, never as a sure fit. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer

HOURS_PER_WEEK = 168.0


@dataclass(frozen=True)
class FreeTierFit:
    provider: str
    instance_type: str
    gpu: str
    gpu_count: int
    weekly_quota_hours: float  # 0 = not published
    session_hours: float
    needed_hours_per_week: float

    @property
    def fits(self) -> bool | None:
        """True/False against a published quota; None when the tier publishes none."""
        if self.weekly_quota_hours <= 0:
            return None
        return self.needed_hours_per_week <= self.weekly_quota_hours

    def line(self) -> str:
        what = f"{self.provider} {self.instance_type} ({self.gpu_count}x {self.gpu})"
        need = f"{self.needed_hours_per_week:.0f} h/week"
        if self.fits is None:
            return (
                f"Free tier: {what} at $0, sessions of at most {self.session_hours:g} h; "
                f"it publishes no weekly quota, so {need} may or may not be granted"
            )
        return (
            f"Free tier: {what} at $0 covers your {need} within its "
            f"{self.weekly_quota_hours:g} h/week quota (sessions of at most "
            f"{self.session_hours:g} h; longer runs need a checkpoint)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "instance_type": self.instance_type,
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "weekly_quota_hours": self.weekly_quota_hours or None,
            "session_hours": self.session_hours,
            "needed_hours_per_week": round(self.needed_hours_per_week, 3),
            "fits": self.fits,
        }


def free_tier_fits(
    offers: Iterable[Offer], gpu: str, count: int, utilization: float
) -> list[FreeTierFit]:
    """The free tiers with ``count`` x ``gpu`` that the utilization fits (or may fit)."""
    needed = HOURS_PER_WEEK * utilization
    out = []
    for o in offers:
        if FLAG_FREE_TIER not in o.flags or o.gpu != gpu or o.gpu_count < count:
            continue
        fit = FreeTierFit(
            o.provider,
            o.instance_type,
            o.gpu,
            o.gpu_count,
            float(o.extra.get("weekly_quota_hours") or 0.0),
            float(o.extra.get("session_hours") or 0.0),
            needed,
        )
        if fit.fits is not False:
            out.append(fit)
    return sorted(out, key=lambda f: (f.fits is None, f.provider, f.instance_type))
