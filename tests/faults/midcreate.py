"""kill -9 of the client in the middle of a create, on a cloud fake that can act as a
request arrives: what `down --orphans --yes` must leave afterwards is nothing."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.faults.record import Case, digest
from tests.faults.simkit import launch_proc
from tests.lifecycle.helpers import cli_proc, job_file, store

Hook = Callable[[str, str], None]


def kill_mid_create(
    case: Case,
    home: Path,
    tmp_path: Path,
    job: str,
    *,
    hook: Callable[[Hook | None], None],
    at: tuple[str, str],
    left: Callable[[], list[str]],
    env: dict[str, str] | None = None,
) -> None:
    """Launch ``job``; the client is killed as a request ``at`` (method, path regex)
    reaches the fake (``hook`` installs the callback); then `down --orphans --yes`.
    ``left()`` names what the fake still holds of this job: something before the sweep,
    nothing after it. The user's files are checked by hash, both exit statuses."""
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own notes\n")
    before = digest(mine)
    client: list[subprocess.Popen[bytes]] = []

    def kill(method: str, path: str) -> None:
        if method == at[0] and re.search(at[1], path, re.I) and client:
            client[0].kill()  # what was made so far exists; the next part is on the wire

    hook(kill)
    proc = launch_proc(job_file(tmp_path, job), home, env)
    client.append(proc)
    proc.communicate(timeout=120)
    hook(None)
    assert left(), "the half-made resources should exist when the client dies"
    res = cli_proc(["down", "--orphans", "--yes"], home, env=env or {})
    gone = left()
    live = store(home).instances(live_only=True)
    said = "; ".join(line.strip() for line in res.stdout.strip().splitlines()[:2])
    case.check(
        leaks=len(gone) + len(live),
        data_lost=digest(mine) != before,
        exit_ok=proc.returncode == -9 and res.returncode == 0,
        outcome=f"`down --orphans` exit {res.returncode}: {said}"
        + (f"; left {gone}" if gone else ""),
    )
