"""Proof that a deleted machine is gone, shared by the providers whose delete returns
before the machine is (Lambda, Vast.ai, RunPod, GCP).

A terminate() that returned while the machine still existed could leave it billing, so
each provider polls its own "is it gone?" a bounded number of times, ``poll_s`` config
apart through the injected sleep, and otherwise raises a TransientError that tells the
user how to retry. This module only waits and reports; it deletes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from cloudgpu.errors import TransientError
from cloudgpu.provider import ProviderContext

CHECKS = 10
RETRY_HINT = "`cloudgpu down --orphans` retries it"


def verify_gone(
    ctx: ProviderContext,
    is_gone: Callable[[], bool],
    *,
    still: str,
    provider: str,
    checks: int = CHECKS,
) -> None:
    """Return once ``is_gone()``; after ``checks`` tries raise ``still`` as transient."""
    for _ in range(checks):
        if is_gone():
            return
        ctx.sleep(float(ctx.config.get("poll_s", 2.0)))
    raise TransientError(still, provider=provider, hint=RETRY_HINT)
