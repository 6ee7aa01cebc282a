"""The process-group kill text (cloudgpu.remote.groupkill) under every shell it meets:
dash is Debian's and Ubuntu's /bin/sh and usually a pod's `sh -c`; its kill refused
`kill -TERM -- -PGID` ("Illegal number: -"), so a stopped job kept running there."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cloudgpu.remote.groupkill import KILL_GRACE_S, kill_group

SHELLS = [s for s in ("dash", "bash", "sh") if shutil.which(s)]


def _group(ignore_term: bool) -> subprocess.Popen[bytes]:
    """A group of two (a shell and its child), both to be ended. Reaped as soon as it
    ends, as the remote side's parent does: a zombie leader still answers `kill -s 0`."""
    trap = "trap '' TERM; " if ignore_term else ""
    p = subprocess.Popen(["sh", "-c", f"{trap}sleep 60 & wait"], start_new_session=True)
    threading.Thread(target=p.wait, daemon=True).start()
    return p


def _gone(pgid: int) -> bool:
    """No live process left in group ``pgid`` (an orphan's zombie waits on whoever
    reaps orphans here, which may be nobody in a container: it has ended all the same)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


@pytest.mark.parametrize("shell", SHELLS)
def test_the_whole_group_ends_on_term(shell: str) -> None:
    p = _group(ignore_term=False)
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        r = subprocess.run([shell, "-c", kill_group(str(p.pid))], capture_output=True, timeout=30)
        assert r.returncode == 0 and r.stderr == b"", r.stderr
        p.wait(timeout=5)
        assert _gone(p.pid), "a process of the group outlived TERM"
        assert time.monotonic() - t0 < KILL_GRACE_S, "TERM did not end the group"
    finally:
        if not _gone(p.pid):
            os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.skipif(not shutil.which("dash"), reason="dash is not installed")
def test_a_group_ignoring_term_is_killed_after_the_grace() -> None:
    p = _group(ignore_term=True)
    try:
        time.sleep(0.2)
        subprocess.run(["dash", "-c", kill_group("$g")], env={"g": str(p.pid)}, timeout=30)
        p.wait(timeout=5)
        assert _gone(p.pid)
    finally:
        if not _gone(p.pid):
            os.killpg(p.pid, signal.SIGKILL)
