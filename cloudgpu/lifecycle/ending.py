"""How a job ends: its exit code told truthfully (an interrupt, a limit, a failed run
each raise their own error), then its instances kept (--keep, outputs held for
collection) or torn down, verified, with the total cost said."""

from __future__ import annotations

from pathlib import Path

from cloudgpu.errors import JobError, LimitExceeded, ProviderError
from cloudgpu.lifecycle import states, watch
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.teardown import job_cost, teardown_job


def log_path(deps: Deps, job_id: str) -> Path | str:
    return deps.store.job(job_id).log_path


def finish(deps: Deps, job_id: str, watcher: watch.Watcher, rc: int) -> int:
    """Record the run's exit code ``rc``; 0, or the error that says why the job ended."""
    reason = watcher.reason
    if reason == watch.INTERRUPTED:
        deps.store.update_job(job_id, exit_code=rc)
        raise KeyboardInterrupt()
    if reason in (watch.MAX_RUNTIME, watch.MAX_COST):
        deps.store.update_job(job_id, exit_code=rc)
        raise LimitExceeded(
            f"job {job_id} stopped: {watcher.detail}; instance torn down, "
            f"log: {log_path(deps, job_id)}"
        )
    deps.store.update_job(
        job_id, exit_code=rc, state=states.SUCCEEDED if rc == 0 else states.FAILED
    )
    if rc != 0:
        raise JobError(
            f"job {job_id}: run failed with exit code {rc}; log: {log_path(deps, job_id)}",
            exit_code=rc,
        )
    return 0


def kept(deps: Deps, job_id: str, keep: bool, held: bool) -> bool:
    """Whether the job's live instances stay (``keep``); said unless they are ``held``
    for `down --collect` (the error already says so)."""
    if not keep or not deps.store.instances(job_id, live_only=True):
        return False
    deps.store.update_job(job_id, state=states.KEPT)
    if not held:
        deps.sink.info(
            f"instance kept (--keep): `cloudgpu ssh {job_id}`, `cloudgpu down {job_id}` when done"
        )
    return True


def tear_down(deps: Deps, job_id: str) -> None:
    """Every live instance of the job goes (verified), the total cost is said; a
    failure is the job's error, with how to retry."""
    deps.store.add_event(job_id, "state", states.TEARING_DOWN)
    failures = teardown_job(deps, job_id)
    deps.sink.info(f"total cost ${job_cost(deps, job_id):.4f}")
    if failures:
        deps.store.update_job(job_id, error="teardown failed: " + failures[0])
        raise ProviderError(
            f"job {job_id}: teardown failed, an instance may still be billing: {failures[0]}",
            hint=f"`cloudgpu down {job_id}` retries; or delete it in the console",
        )
