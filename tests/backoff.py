"""Checking waits that cloudgpu.retry jitters: each is at most the exponential step and
no less than that step less the jitter share (equal jitter, 0.5 by default)."""

from __future__ import annotations

from collections.abc import Sequence


def jittered(waits: Sequence[float], steps: Sequence[float], jitter: float = 0.5) -> bool:
    """Whether ``waits`` are ``steps`` as cloudgpu.retry.Backoff jitters them."""
    return len(waits) == len(steps) and all(
        s * (1 - jitter) - 1e-9 <= w <= s + 1e-9 for w, s in zip(waits, steps, strict=True)
    )
