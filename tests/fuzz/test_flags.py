"""Bad command-line flags (well over 150 combinations): every one is refused with exit 2
and one error line (plus at most a hint) that names the flag, never a traceback or
"internal error", and nothing is written in the working directory.

Every numeric option of the offline commands gets every bad number; every duration,
size and count option gets every bad form; and a list of odd single cases follows. The
commands run in-process through click's runner (a few milliseconds each).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fuzz.cases import TEMPLATES
from tests.lifecycle.helpers import main_exit

BAD_NUMBERS = ["nan", "inf", "-inf", "-1", "1e999", "abc", "", "0x10", "1" * 400]
BAD_DURATIONS = ["nan", "10x", "99999999d", "-5m", "1e999s", "", "0", "9" * 400 + "h", "inf"]
BAD_SIZES = ["nanGB", "-1GB", "1e999GB", "5XB", "inf", "nan", "", "GB", "9" * 400]

RUNNER = ["runner", "start", "--repo", "o/r", "--gpu", "T4", "--dry-run"]
BUY = ["buy-vs-rent", "--gpu", "H100-SXM"]
ESTIMATE = ["estimate", "--kind", "train", "--model", "llama-3-8b", "--tokens", "1B"]
NUMERIC = [
    (["offers"], "--max-price"),
    (["offers"], "--stale-days"),
    (["offers"], "--limit"),
    (["offers"], "--gpus"),
    (["offers"], "--cpus"),
    (["catalog", "info"], "--stale-days"),
    (["report", "offers"], "--max-price"),
    (["plan", "job.yaml"], "--limit"),
    (RUNNER, "--max-price"),
    (ESTIMATE, "--mfu"),
    (ESTIMATE, "--seq-len"),
    (["estimate", "--kind", "train", "--tokens", "1B"], "--params"),
    (["estimate", "--kind", "train", "--params", "8B"], "--tokens"),
    (BUY, "--utilization"),
    (BUY, "--years"),
    (BUY, "--electricity"),
    (BUY, "--count"),
]
DURATIONS = [(["report", "spend"], "--since"), (RUNNER, "--ttl"), (RUNNER, "--idle-timeout")]
SIZES = [(["offers"], "--min-gpu-memory"), (["offers"], "--memory"), (["offers"], "--nvme")]
ODD = [
    (["offers", "--gpu", "nosuchgpu"], "nosuchgpu"),
    (["offers", "--provider", "nope"], "nope"),
    (["offers", "--sort", "x"], "--sort"),
    (["offers", "--spot", "--on-demand"], "--spot"),
    (["offers", "--region", "\x00"], "--region"),
    (["offers", "--gpu", "x" * 1_000_000], "GPU"),
    (["gpus", "--provider", "zz"], "zz"),
    (["report", "spend", "--format", "x"], "--format"),
    (["report", "plan", "job.yaml", "--table", "zz"], "--table"),
    (["report", "offers", "--table", "zz"], "--table"),
    (["plan", "nosuch.yaml"], "nosuch.yaml"),
    (["plan", "job.yaml", "--objective", "zzz"], "--objective"),
    (["launch", "nosuch.yaml", "--dry-run"], "nosuch.yaml"),
    (["schema", "--check", "nosuch.yaml"], "nosuch.yaml"),
    (["init", "nosuch"], "nosuch"),
    (["init", "quickstart", "/dev/null/x"], "/dev/null"),  # cannot be made
    (["init", "quickstart", "job.yaml/x"], "job.yaml"),  # a file where a folder goes
    (["completion", "tcsh"], "tcsh"),
    (["estimate", "--kind", "train", "--model", "nosuch"], "nosuch"),
    (["estimate", "--kind", "nope"], "--kind"),
    (["data", "ls", "s3://"], "s3://"),
    (["data", "ls", "ftp://x/y"], "ftp://"),
    (["buy-vs-rent", "--gpu", "nosuch"], "nosuch"),
    ([*RUNNER[:5], "nosuch", "--dry-run"], "nosuch"),
    (["runner", "start", "--repo", "bad repo", "--gpu", "T4", "--dry-run"], "--repo"),
    (["status", "--json", "--nosuch"], "--nosuch"),
    (["nosuch-command"], "nosuch-command"),
]


def combos() -> list[tuple[list[str], str]]:
    out = [([*cmd, flag, v], flag) for cmd, flag in NUMERIC for v in BAD_NUMBERS]
    out += [([*cmd, flag, v], flag) for cmd, flag in DURATIONS for v in BAD_DURATIONS]
    out += [([*cmd, flag, v], flag) for cmd, flag in SIZES for v in BAD_SIZES]
    return out + ODD


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(TEMPLATES / "quickstart.yaml", tmp_path / "job.yaml")
    shutil.copytree(TEMPLATES / "quickstart-data", tmp_path / "quickstart-data")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_there_are_enough_combinations() -> None:
    assert len(combos()) >= 150


def test_every_bad_flag_is_one_line_naming_it(workdir: Path, cloudgpu_home: Path) -> None:
    before = sorted(p.name for p in workdir.rglob("*"))
    failed = []
    for args, named in combos():
        code, _, err = main_exit(args)
        lines = err.splitlines()
        ok = (
            code == 2
            and lines
            and lines[0].startswith("error: ")
            and (len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")))
            and named.lower() in err.lower()[:1100]
            and len(lines[0]) <= 1100
            and "internal error" not in err
            and "Traceback" not in err
        )
        if not ok:
            failed.append(f"{[a[:40] for a in args]} -> {code}: {err[:300]!r}")
    assert not failed, f"{len(failed)} of {len(combos())}:\n" + "\n".join(failed[:30])
    assert sorted(p.name for p in workdir.rglob("*")) == before
