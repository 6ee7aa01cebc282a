"""What the lifecycle decides when something breaks under a job, kept out of its loop.

* :func:`deadline` / :func:`deadline_text`: when an instance must stop itself (so no
  instance outlives its job by much, whatever happens to the client).
* :func:`instance_lost`: after a dropped session, was the instance taken away (the
  preemption path) or is it healthy (reconnect)? Providers' states lag their machines,
  so it asks for a while.
* :func:`uncollected`: the error a job ends with when its outputs could not be fetched:
  kept for ``collect_grace`` when the instance is still there, lost when it is gone.

Nothing here touches the store or decides by provider name.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CloudGPUError, RemoteError
from cloudgpu.lifecycle.collect import OutputsNotCollected, where
from cloudgpu.lifecycle.provision import Provisioned
from cloudgpu.provider import InstanceState
from cloudgpu.spec.model import JobSpec

EXIT_LOST = 255  # what a command reports when its session died under it
LOST_STATES = (
    InstanceState.PREEMPTED,
    InstanceState.TERMINATED,
    InstanceState.STOPPING,
    InstanceState.STOPPED,
)
LOST_WAIT_S, LOST_POLL_S = 30.0, 2.0


def deadline(
    job: JobSpec, offer: Offer, started: float, now: float, spent: float, default_s: float
) -> float:
    """When an instance of ``offer`` must stop itself (before the grace): at max_runtime,
    when what is left of max_cost is spent at its price, or after ``default_s``."""
    limits = job.limits
    ends = [started + (limits.max_runtime_s or default_s)]
    if limits.max_cost is not None and offer.price_per_hour > 0:
        left = max(0.0, limits.max_cost - spent)
        ends.append(now + left / offer.price_per_hour * 3600)
    return min(ends)


def deadline_text(job: JobSpec, offer: Offer, default_s: float) -> str:
    """What stops the instance by itself, for the plan: "6 h after start (...)"."""
    end = deadline(job, offer, 0.0, 0.0, 0.0, default_s)
    lim = job.limits
    why = "limits.max_runtime" if lim.max_runtime_s else "launch.default_deadline"
    if lim.max_cost is not None and end < (lim.max_runtime_s or default_s):
        why = "limits.max_cost at its price"
    span = f"{end / 60:.0f} min" if end < 3600 else f"{end / 3600:.3g} h"
    return f"{span} after start ({why}), plus the grace"


def instance_lost(got: Provisioned, sleep: Callable[[float], None]) -> InstanceState | None:
    """The state that says ``got``'s instance is gone, or None: it is running (or the
    provider could not tell within LOST_WAIT_S)."""
    for _ in range(int(LOST_WAIT_S / LOST_POLL_S)):
        try:
            state = got.provider.describe(got.instance.id).state
        except CloudGPUError:
            state = InstanceState.UNKNOWN
        if state in LOST_STATES:
            return state
        if state == InstanceState.RUNNING:
            return None
        sleep(LOST_POLL_S)
    return None


def uncollected(
    job_id: str, job: JobSpec, got: Provisioned, rc: int, exc: OutputsNotCollected, until: float
) -> RemoteError:
    """The error for outputs that could not be fetched: ``exc`` kept until ``until`` (its
    ``until`` set) when the instance is still there, else outputs lost (not kept)."""
    ran = f"the run exited {rc}" if rc else "the run succeeded"
    iid = got.instance.id
    if got.provider.describe(iid).state.is_gone:
        return RemoteError(f"job {job_id}: {ran}, but its outputs are lost: {iid} is gone ({exc})")
    at = time.strftime("%H:%M", time.localtime(until))
    held = OutputsNotCollected(
        f"job {job_id}: {ran}, but {exc}; they are still on instance {iid}: {where(job)}",
        hint=f"instance kept until {at}: `cloudgpu down {job_id} --collect` fetches them, "
        "then tears it down",
    )
    held.until = until
    return held
