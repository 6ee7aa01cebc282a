"""`status --refresh`: ask the providers what the store believes is still live.

An instance that stopped itself (its deadline), was preempted or was deleted in the
console while no client watched is recorded as such, with its spend up to when it ended
(the provider's own time where it reports one, else now); a job whose instances are all
gone and whose client is not driving it any more is settled. Plain `status` never asks a
provider: :func:`unconfirmed` says which of its records it cannot vouch for.
"""

from __future__ import annotations

import socket

from cloudgpu.costs import billing
from cloudgpu.errors import CloudGPUError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import LEASE_S
from cloudgpu.provider import InstanceState
from cloudgpu.state.store import JobRecord

ENDED = (InstanceState.TERMINATED, InstanceState.PREEMPTED, InstanceState.STOPPED)


def refresh_job(deps: Deps, job: JobRecord) -> list[str]:
    """Bring ``job``'s live instance records in line with their providers; one line per
    change (or per provider that could not be asked)."""
    notes = []
    for rec in deps.store.instances(job.id, live_only=True):
        if not rec.provider_id:
            continue
        try:
            provider = deps.provider(rec.provider)
            inst = provider.describe(rec.provider_id)
        except (CloudGPUError, ImportError) as exc:
            notes.append(f"{rec.provider_id}: cannot ask {rec.provider}: {exc}")
            continue
        if inst.state.value == rec.state:
            continue
        if inst.state in ENDED:
            end = inst.ended_at or deps.clock()
            deps.store.update_instance(rec.id, state=inst.state.value, terminated_at=end)
            spent = billing.record_spend(
                deps.store, deps.store.instance(rec.id), end, provider.capabilities
            )
            deps.store.add_event(job.id, "refreshed", f"{inst.state.value}; ${spent:.4f}", rec.id)
            notes.append(f"{rec.provider_id}: {inst.state.value} (recorded {rec.state})")
        elif inst.state != InstanceState.UNKNOWN:
            deps.store.update_instance(rec.id, state=inst.state.value)
            notes.append(f"{rec.provider_id}: {inst.state.value} (recorded {rec.state})")
    _settle(deps, deps.store.job(job.id))
    return notes


def _settle(deps: Deps, job: JobRecord) -> None:
    if deps.store.instances(job.id, live_only=True):
        return
    if job.state == states.KEPT:
        deps.store.update_job(job.id, state=states.STOPPED, error="its instance stopped by itself")
    elif job.state in states.ACTIVE and states.holder(job, socket.gethostname()) is False:
        deps.store.update_job(job.id, state=states.FAILED, error="client gone; instance ended")


def unconfirmed(job: JobRecord, now: float, host: str) -> bool:
    """Is ``job``'s live-looking record one the store alone cannot vouch for: its client
    is gone, or nothing confirmed it within a lease (a kept instance may have stopped
    itself)?"""
    if job.state == states.KEPT:
        return now - job.updated_at > LEASE_S
    if job.state not in states.ACTIVE:
        return False
    held = states.holder(job, host)
    return held is False or (held is None and now - job.updated_at > LEASE_S)
