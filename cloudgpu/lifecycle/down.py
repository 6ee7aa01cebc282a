"""Stopping jobs and sweeping orphans: what `cloudgpu down` does.

A job whose lifecycle process is alive is asked to stop with SIGTERM (it tears down its
own instance, as on Ctrl-C); whatever is still live afterwards is torn down from here.
The orphan sweep lists every enabled provider's instances carrying our owner tag and
removes those no live job owns, then settles store records whose instance is gone.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from cloudgpu.errors import CloudGPUError, StateError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.teardown import teardown_instance, teardown_job
from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, TAG_OWNER, Provider
from cloudgpu.state.store import InstanceRecord, JobRecord

STOP_WAIT_S = 120.0


def down_job(deps: Deps, job: JobRecord, wait_s: float = STOP_WAIT_S) -> list[str]:
    """Stop ``job`` and tear its instances down; return teardown failures."""
    if job.state in states.ACTIVE and job.pid != os.getpid() and states.pid_alive(job.pid):
        assert job.pid is not None
        deps.sink.info(f"stopping the lifecycle process of {job.id} (pid {job.pid})")
        try:
            os.kill(job.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        waited = 0.0
        while states.pid_alive(job.pid) and waited < wait_s:
            deps.sleep(0.2)
            waited += 0.2
    failures = teardown_job(deps, job.id)
    current = deps.store.job(job.id)
    if current.state not in states.FINAL:
        deps.store.update_job(job.id, state=states.STOPPED, error="stopped by `cloudgpu down`")
    deps.store.add_event(job.id, "down", "; ".join(failures) or "ok")
    return failures


def purge_job(deps: Deps, job: JobRecord) -> list[InstanceRecord]:
    """Stop tracking ``job`` without asking its provider (gone, unreachable, or its
    plugin uninstalled): its live instance records become ``purged`` and the job
    ``stopped``. Returns those records: whatever they stood for may still be billing.
    Refused while the job's own lifecycle process is alive (`down JOB` stops that)."""
    if job.state in states.ACTIVE and job.pid != os.getpid() and states.pid_alive(job.pid):
        raise StateError(
            f"job {job.id} is still driven by its process (pid {job.pid})",
            hint=f"`cloudgpu down {job.id}` stops it and tears it down",
        )
    live = deps.store.instances(job.id, live_only=True)
    now = deps.clock()
    for rec in live:
        deps.store.update_instance(rec.id, state=states.I_PURGED, terminated_at=now)
        what = f"{rec.provider} {rec.provider_id or '(id never recorded)'}"
        deps.store.add_event(job.id, "instance_purged", f"{what}: may still bill", rec.id)
    if job.state not in states.FINAL:
        deps.store.update_job(
            job.id, state=states.STOPPED, error="purged by `cloudgpu down --purge`"
        )
    deps.store.add_event(job.id, "purged", f"{len(live)} instance record(s) dropped")
    return live


def _owned(deps: Deps, job_id: str | None) -> bool:
    if not job_id:
        return False
    try:
        return states.job_is_live(deps.store.job(job_id))
    except StateError:
        return False


def sweep_orphans(deps: Deps, providers: Sequence[Provider]) -> list[str]:
    """Remove tagged instances no live job owns; return one line per instance removed."""
    removed = []
    for provider in providers:
        try:
            found = provider.list_instances({TAG_OWNER: deps.owner})
        except CloudGPUError as exc:
            deps.sink.info(f"{provider.name}: cannot list instances: {exc}")
            continue
        for inst in found:
            if _owned(deps, inst.tags.get(TAG_JOB)):
                continue
            try:
                provider.terminate(inst.id)
                _settle(deps, inst.tags.get(TAG_INSTANCE, ""))
            except CloudGPUError as exc:
                deps.sink.info(f"{provider.name} {inst.id}: not removed: {exc}")
                continue
            removed.append(f"{provider.name} {inst.id} (job {inst.tags.get(TAG_JOB, '?')})")
    for rec in deps.store.instances(live_only=True):
        if _owned(deps, rec.job_id):
            continue
        try:
            teardown_instance(deps, rec)
        except CloudGPUError as exc:
            deps.sink.info(f"{rec.provider} {rec.provider_id or rec.id}: {exc}")
            continue
        removed.append(f"record {rec.id} of job {rec.job_id} settled")
        _finish_job(deps, rec.job_id)
    return removed


def _settle(deps: Deps, rec_id: str) -> None:
    try:
        rec = deps.store.instance(rec_id)
    except StateError:
        return
    if rec.state not in states.I_LIVE_EXCLUDE:
        teardown_instance(deps, rec)
    _finish_job(deps, rec.job_id)


def _finish_job(deps: Deps, job_id: str) -> None:
    try:
        job = deps.store.job(job_id)
    except StateError:
        return
    if job.state not in states.FINAL:
        deps.store.update_job(
            job_id, state=states.FAILED, error="client gone; instance removed by `down --orphans`"
        )
