"""Background processes that outlive the command: a detached job, an idle reaper.

Both are this same program re-executed in a new session (setsid), so closing the
terminal or the client exiting does not stop them; their output goes to the job's log.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from cloudgpu.atomicfile import append_private


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> int:
    """Start ``python -m cloudgpu ARGV`` (or another module) detached; return its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with append_private(log_path) as log:
        proc = subprocess.Popen(
            [sys.executable, *argv],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    return proc.pid


def launch_argv(job_file: str, job_id: str, keep: bool, extra: Sequence[str] = ()) -> list[str]:
    """The detached child's command line; ``extra``: launch flags passed through."""
    argv = [
        "-m",
        "cloudgpu",
        "launch",
        str(Path(job_file).resolve()),
        "--yes",
        "--foreground-of",
        job_id,
    ]
    return [*argv, *(["--keep"] if keep else []), *extra]


def reaper_argv(job_id: str, idle_s: float, until: float | None = None) -> list[str]:
    argv = ["-m", "cloudgpu.lifecycle.reaper", job_id, str(idle_s)]
    return [*argv, str(until)] if until is not None else argv
