"""The idle reaper: tears down a kept (``--keep``) instance after ``idle_timeout``.

Run detached as ``python -m cloudgpu.lifecycle.reaper JOB_ID IDLE_SECONDS [UNTIL]``.
Activity is any ``activity`` event (`cloudgpu exec`, `cloudgpu ssh`) or job update; when
none happened for IDLE_SECONDS, or at UNTIL (unix seconds: the end of the grace an
instance holding uncollected outputs is kept for), the job is brought down (collecting
its outputs first if the instance answers). It exits as soon as the job is no
longer kept (someone ran `down`). The instance-side deadline backs it up if it dies.
"""

from __future__ import annotations

import os
import sys

from cloudgpu.config import load_config
from cloudgpu.errors import CloudGPUError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps, build_deps
from cloudgpu.lifecycle.down import down_job
from cloudgpu.lifecycle.output import JobLog
from cloudgpu.paths import default_paths
from cloudgpu.registry import Registry
from cloudgpu.state.store import Store

ACTIVITY = "activity"


def last_activity(store: Store, job_id: str) -> float:
    job = store.job(job_id)
    seen = [e["ts"] for e in store.events(job_id) if e["kind"] == ACTIVITY]
    return max([job.updated_at, *seen])


def reap(deps: Deps, job_id: str, idle_s: float, until: float | None = None) -> bool:
    """Wait until the job is idle for ``idle_s`` (or it is ``until``) and bring it down;
    False if no longer kept."""
    while True:
        job = deps.store.job(job_id)
        if job.state != states.KEPT:
            return False
        now = deps.clock()
        idle_for = now - last_activity(deps.store, job_id)
        if until is not None and now >= until:
            deps.sink.info("the grace for collecting outputs ended: tearing down")
            down_job(deps, job)
            return True
        if idle_for >= idle_s:
            deps.sink.info(f"idle for {idle_for:.0f} s (idle_timeout {idle_s:g} s): tearing down")
            down_job(deps, job)
            return True
        left = idle_s - idle_for if until is None else min(idle_s - idle_for, until - now)
        deps.sleep(min(left, 30.0))


def main(argv: list[str]) -> int:
    job_id, idle_s = argv[0], float(argv[1])
    until = float(argv[2]) if len(argv) > 2 else None
    env = dict(os.environ)
    paths = default_paths(env)
    registry = Registry(load_config(paths.config_file), paths, env)
    store = Store.open(paths.state_db)
    job = store.job(job_id)
    sink = JobLog(paths.logs_dir / f"{job_id}.log", terminal=False)
    deps = build_deps(store=store, registry=registry, sink=sink)
    try:
        reap(deps, job.id, idle_s, until)
    except CloudGPUError as exc:
        sink.info(f"reaper: {exc}")
        return 1
    finally:
        sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
