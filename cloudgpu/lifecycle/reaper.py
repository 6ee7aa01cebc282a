"""The idle reaper: tears down a kept (``--keep``) instance after ``idle_timeout``.

Run detached as ``python -m cloudgpu.lifecycle.reaper JOB_ID IDLE_SECONDS``. Activity
is any ``activity`` event (`cloudgpu exec`, `cloudgpu ssh`) or job update; when none
happened for IDLE_SECONDS the job is brought down. It exits as soon as the job is no
longer kept (someone ran `down`). The instance-side deadline backs it up if it dies.
"""

from __future__ import annotations

import os
import sys
import time

from cloudgpu.config import load_config
from cloudgpu.errors import CloudGPUError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.down import down_job
from cloudgpu.lifecycle.launch import owner
from cloudgpu.lifecycle.output import JobLog
from cloudgpu.paths import default_paths
from cloudgpu.registry import Registry
from cloudgpu.remote import connect
from cloudgpu.state.store import Store

ACTIVITY = "activity"


def last_activity(store: Store, job_id: str) -> float:
    job = store.job(job_id)
    seen = [e["ts"] for e in store.events(job_id) if e["kind"] == ACTIVITY]
    return max([job.updated_at, *seen])


def reap(deps: Deps, job_id: str, idle_s: float) -> bool:
    """Wait until the job is idle for ``idle_s`` and bring it down; False if no longer kept."""
    while True:
        job = deps.store.job(job_id)
        if job.state != states.KEPT:
            return False
        idle_for = deps.clock() - last_activity(deps.store, job_id)
        if idle_for >= idle_s:
            deps.sink.info(f"idle for {idle_for:.0f} s (idle_timeout {idle_s:g} s): tearing down")
            down_job(deps, job)
            return True
        deps.sleep(min(idle_s - idle_for, 30.0))


def main(argv: list[str]) -> int:
    job_id, idle_s = argv[0], float(argv[1])
    env = dict(os.environ)
    paths = default_paths(env)
    registry = Registry(load_config(paths.config_file), paths, env)
    store = Store.open(paths.state_db)
    job = store.job(job_id)
    sink = JobLog(paths.logs_dir / f"{job_id}.log", terminal=False)
    deps = Deps(store, registry.get, paths, sink, owner(), connect, clock=time.time, env=env)
    try:
        reap(deps, job.id, idle_s)
    except CloudGPUError as exc:
        sink.info(f"reaper: {exc}")
        return 1
    finally:
        sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
