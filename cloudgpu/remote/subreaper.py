"""Run one command of a `local` instance so that nothing it starts outlives teardown.

``python -I -S subreaper.py STATUS_FD -- CMD...`` becomes a child subreaper
(PR_SET_CHILD_SUBREAPER): every process the command starts stays below it, even one
that detaches with ``setsid ... &``, double-forks or clears its environment, because
orphans are re-parented here instead of to init. When the command exits its status is
written to STATUS_FD (so the caller need not wait), then this process keeps reaping
until the last descendant is gone (a deadline watchdog, see WATCHDOG_MARK, excepted).
On SIGTERM/SIGINT/SIGHUP it stops its whole tree (TERM, then KILL after a grace) and
exits. Standard library only, no cloudgpu import:
it starts in milliseconds and the job cannot shadow a module it needs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 2.0  # shorter than the provider's own grace, which KILLs what is left
# The instance's deadline watchdog (templates/bootstrap.sh) carries this mark: it is
# meant to outlive the command that armed it and to stop the job itself, so stopping
# that command spares it; teardown ends it by the same mark (cloudgpu/builtin/procs.py).
WATCHDOG_MARK = b"CLOUDGPU_DEADLINE_OF="


def make_subreaper() -> bool:
    """Become the reaper of every orphan below this process (Linux); False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """PIDs below ``root`` from /proc (children before their parents are not ordered)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _watchdog(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return any(v.startswith(WATCHDOG_MARK) for v in fh.read().split(b"\0"))
    except OSError:
        return False


def _tree(root: int) -> list[int]:
    return [p for p in descendants(root) if not _watchdog(p)]


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(grace_s: float = GRACE_S) -> None:
    """TERM every descendant, reap them, KILL whatever is left after ``grace_s``."""
    me = os.getpid()
    _signal_all(_tree(me), signal.SIGTERM)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and _reap_some():
        time.sleep(0.05)
    for _ in range(20):  # a tree still forking is KILLed until none is left
        left = _tree(me)
        if not left:
            return
        _signal_all(left, signal.SIGKILL)
        _reap_some()
        time.sleep(0.01)


def _reap_some() -> bool:
    """Reap finished children; False when there are none left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: subreaper.py STATUS_FD -- CMD...", file=sys.stderr)
        return 2
    status_fd = int(argv[1])
    make_subreaper()

    def on_signal(signum: int, frame: object) -> None:
        stop_tree()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        child = subprocess.Popen(argv[3:], close_fds=True)
    except OSError as exc:
        print(f"cannot run {argv[3]}: {exc.strerror}", file=sys.stderr)
        os.write(status_fd, b"127\n")
        return 127
    rc = child.wait()
    rc = rc if rc >= 0 else 128 - rc
    os.write(status_fd, f"{rc}\n".encode())
    os.close(status_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # let the caller see EOF unless a descendant holds the pipes
        os.dup2(devnull, fd)
    # Hold on to what the command left running (until it ends, or teardown stops it);
    # a deadline watchdog alone is not held: it ends by itself.
    while _reap_some() and _tree(os.getpid()):
        time.sleep(0.5)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
