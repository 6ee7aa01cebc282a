"""Free tiers (Kaggle, Colab): what their session and weekly quota limits mean for a job.

A free-tier offer carries ``session_hours`` (the longest one session may run) and
``weekly_quota_hours`` (0 = not published) in ``Offer.extra``. A job estimated to run
longer than one session fits only if it has a checkpoint, so a next session can continue
from it; the plan says how many sessions and how many weeks of quota it takes. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer

CHAIN_OVERHEAD_H = 0.1  # per extra session: queueing, restoring data and the checkpoint


@dataclass(frozen=True)
class SessionPlan:
    sessions: int
    weeks: int | None  # None when the tier publishes no weekly quota
    fits: bool
    reason: str = ""  # why it does not fit
    extra_hours: float = 0.0  # time the chain of sessions adds

    @property
    def note(self) -> str:
        many = f"{self.sessions} sessions" if self.sessions > 1 else "1 session"
        if self.weeks is None:
            return f"free tier: {many} (no published weekly quota)"
        return f"free tier: {many}, {self.weeks} week(s) of quota"


def is_free_tier(offer: Offer) -> bool:
    return FLAG_FREE_TIER in offer.flags


def session_plan(offer: Offer, est_hours: float, has_checkpoint: bool) -> SessionPlan:
    session = float(offer.extra.get("session_hours") or 0.0)
    quota = float(offer.extra.get("weekly_quota_hours") or 0.0)
    if session <= 0:
        return SessionPlan(1, None, True)
    sessions = max(1, math.ceil(est_hours / session - 1e-9))
    weeks = max(1, math.ceil(est_hours / quota - 1e-9)) if quota > 0 else None
    if sessions > 1 and not has_checkpoint:
        return SessionPlan(
            sessions,
            weeks,
            False,
            f"needs {sessions} free-tier sessions of {session:g} h; set checkpoint: "
            "so the job can continue in the next session",
        )
    return SessionPlan(sessions, weeks, True, extra_hours=(sessions - 1) * CHAIN_OVERHEAD_H)
