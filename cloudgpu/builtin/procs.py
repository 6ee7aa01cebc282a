"""Find and stop the processes of one instance on this machine, by their environment.

Every command the lifecycle starts carries ``CLOUDGPU_INSTANCE=<id>`` in its
environment, and children inherit it, so scanning /proc finds a job's processes even
after the client that started them died. Only processes of the current user are visible
and signalled; nothing else on the machine is touched.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from cloudgpu.remote.subreaper import descendants

INSTANCE_ENV = "CLOUDGPU_INSTANCE"
WATCHDOG_ENV = "CLOUDGPU_DEADLINE_OF"  # carried by the bootstrap's deadline watchdog
PROC = Path("/proc")


def tagged_pids(instance_id: str, proc: Path = PROC, *, watchdog: bool = False) -> list[int]:
    """PIDs whose environment holds ``CLOUDGPU_INSTANCE=instance_id`` (the job's), and
    with ``watchdog`` also ``CLOUDGPU_DEADLINE_OF=instance_id`` (its deadline watchdog)."""
    needles = {f"{INSTANCE_ENV}={instance_id}".encode()}
    if watchdog:
        needles.add(f"{WATCHDOG_ENV}={instance_id}".encode())
    me = os.getpid()
    pids = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's process
            continue
        if needles & set(env.split(b"\0")):
            pids.append(int(entry.name))
    return pids


def stop_tagged(
    instance_id: str,
    grace_s: float = 3.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """TERM the instance's processes, KILL what is left after ``grace_s``; return count.

    The instance's processes are the tagged ones and everything below them: a job child
    that cleared its environment and detached (``env -i setsid ...``) is still below the
    subreaper its command ran under (cloudgpu/remote/subreaper.py)."""
    pids = _with_descendants(tagged_pids(instance_id, watchdog=True))
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    waited = 0.0
    while waited < grace_s and any(_alive(p) for p in pids):
        sleep(0.1)
        waited += 0.1
    for pid in _with_descendants(tagged_pids(instance_id, watchdog=True)) | pids:
        _signal(pid, signal.SIGKILL)
    return len(pids)


def _with_descendants(pids: list[int]) -> set[int]:
    out = set(pids)
    for pid in pids:
        out.update(descendants(pid))
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    # A zombie still answers signal 0; its stat state says it is dead.
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0:1] != ["Z"]


def kill_script(instance_id: str) -> str:
    """Shell text that stops the instance's processes (and its deadline watchdog) on another
    machine: TERM, then KILL."""
    return (
        "scan() { for f in /proc/[0-9]*/environ; do "
        f"if tr '\\0' '\\n' < \"$f\" 2>/dev/null | "
        f"grep -qxE '({INSTANCE_ENV}|{WATCHDOG_ENV})={instance_id}'; "
        'then p=${f#/proc/}; kill -"$1" "${p%/environ}" 2>/dev/null; fi; done; }; '
        "scan TERM; sleep 2; scan KILL; true"
    )
