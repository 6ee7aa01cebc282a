"""Helpers for lifecycle and launch tests: job files, CLI calls, store reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from cloudgpu.cli import cli, main
from cloudgpu.paths import default_paths
from cloudgpu.state.store import Store

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def quickstart(tmp_path: Path) -> Path:
    """A copy of the quickstart job (and its data) whose outputs land in tmp_path."""
    shutil.copytree(TEMPLATES / "quickstart-data", tmp_path / "quickstart-data")
    job = tmp_path / "quickstart.yaml"
    shutil.copy(TEMPLATES / "quickstart.yaml", job)
    return job


def job_file(tmp_path: Path, body: str, name: str = "job.yaml") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def invoke(args: Sequence[str]) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def main_exit(args: Sequence[str]) -> tuple[int, str, str]:
    """Run through cloudgpu.cli.main in-process (errors become one line + exit code)."""
    res = CliRunner().invoke(_Main(main), list(args), catch_exceptions=True)  # type: ignore[arg-type]
    code = res.exit_code if isinstance(res.exit_code, int) else 1
    return code, res.stdout, res.stderr


class _Main:
    """Adapts main(argv) to CliRunner.invoke's ``cli.main`` call."""

    def __init__(self, fn: Callable[[list[str]], Any]) -> None:
        self.fn = fn
        self.name = "cloudgpu"

    def main(self, args: list[str], prog_name: str | None = None, **_: Any) -> Any:
        return self.fn(args)


def cli_proc(args: Sequence[str], home: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLOUDGPU_HOME": str(home)}
    env.update(kw.pop("env", {}))
    return subprocess.run(
        [sys.executable, "-m", "cloudgpu", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=kw.pop("timeout", 120),
        check=False,
        **kw,
    )


def store(home: Path) -> Store:
    return Store.open(default_paths({"CLOUDGPU_HOME": str(home)}).state_db)


def status_json(home: Path) -> list[dict[str, Any]]:
    res = cli_proc(["status", "--json"], home)
    assert res.returncode == 0, res.stderr
    data: list[dict[str, Any]] = json.loads(res.stdout)
    return data


def wait_for(pred: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def local_workspaces(home: Path) -> list[Path]:
    root = home / "data" / "local"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


class Lines:
    """An output sink (cloudgpu.lifecycle.output.Sink) that keeps the info lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *, detail: bool = False) -> None:
        self.lines.append(message)

    def job_output(self, data: bytes, *, stderr: bool = False) -> None:
        pass

    def progress(self, label: str, done: int, total: int) -> None:
        pass
