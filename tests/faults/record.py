"""One row of the fault matrix per case: what was left, what was lost, the exit code.

Each case calls :meth:`Case.check` once it has recovered as documented; the row is
written to the file named by $CLOUDGPU_FAULTS_REPORT (when set) before the assertions,
so a failing case still shows in the table as failing, with its numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

REPORT_ENV = "CLOUDGPU_FAULTS_REPORT"


@dataclass
class Case:
    id: str
    cloud: str = ""  # sim, aws, any
    fault: str = ""
    stage: str = ""
    leaks: int = 0  # instances + tagged resources left after the documented recovery
    data_lost: bool = False  # a user file changed, or an output truncated/partial
    exit_ok: bool = True  # every exit status involved told the truth
    outcome: str = ""  # what the user is left with, in words
    passed: bool = False

    def check(self, *, leaks: int, data_lost: bool, exit_ok: bool, outcome: str) -> None:
        self.leaks, self.data_lost, self.exit_ok, self.outcome = leaks, data_lost, exit_ok, outcome
        self.passed = leaks == 0 and not data_lost and exit_ok
        write(self)
        assert leaks == 0, f"{self.id}: {leaks} instance(s)/resource(s) left"
        assert not data_lost, f"{self.id}: data lost ({outcome})"
        assert exit_ok, f"{self.id}: untruthful exit status ({outcome})"


def write(case: Case) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(case)) + "\n")


def digest(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` by its SHA-256 (partial files included)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def partials(root: Path) -> list[Path]:
    return sorted(root.rglob(".cgpu-*.part")) if root.exists() else []
