"""`cloudgpu status | logs | down | ssh | exec` through click's runner and a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lifecycle.helpers import (
    cli_proc,
    job_file,
    local_workspaces,
    main_exit,
    store,
    wait_for,
)


def test_status_empty(cloudgpu_home: Path) -> None:
    code, out, _ = main_exit(["status"])
    assert code == 0 and "no jobs yet" in out
    code, out, _ = main_exit(["status", "--json"])
    assert code == 0 and json.loads(out) == []


def test_status_logs_and_history(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: hist\nrun: echo from-the-job\n")
    assert main_exit(["launch", str(job), "--yes"])[0] == 0
    code, out, _ = main_exit(["status"])
    assert code == 0 and "hist-" in out and "succeeded" in out and "local" in out
    code, out, _ = main_exit(["status", "hist", "--json"])
    (row,) = json.loads(out)
    assert {"id", "name", "state", "provider", "instance_type", "cost", "instances"} <= set(row)
    kinds = [e["kind"] for e in row["events"]]
    assert "instance_created" in kinds and "instance_terminated" in kinds
    code, out, _ = main_exit(["logs", row["id"]])
    assert code == 0 and "from-the-job" in out and "[cloudgpu] terminated" in out
    code, out, _ = main_exit(["logs", "hist", "-f"])  # finished: -f returns at once
    assert code == 0 and "from-the-job" in out


def test_unknown_job_and_bad_down_usage(cloudgpu_home: Path) -> None:
    code, _, err = main_exit(["logs", "nope"])
    assert code == 2 and "no job 'nope'" in err and "Traceback" not in err
    code, _, err = main_exit(["down"])
    assert code == 2 and "exactly one of" in err
    code, out, _ = main_exit(["down", "--all"])
    assert code == 0 and "nothing to bring down" in out
    code, out, _ = main_exit(["down", "--orphans"])
    assert code == 0 and "0 orphan(s) removed" in out


def test_ssh_into_local_workspace(
    tmp_path: Path, cloudgpu_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_file(tmp_path, "name: shell\nrun: touch $CLOUDGPU_NVME/marker\n")
    assert main_exit(["launch", str(job), "--yes", "--keep"])[0] == 0
    probe = tmp_path / "probe.sh"
    probe.write_text('#!/bin/sh\ntest -f "$CLOUDGPU_NVME/marker" && exit 0; exit 9\n')
    probe.chmod(0o755)
    monkeypatch.setenv("SHELL", str(probe))  # the "interactive shell" checks where it is
    code, _, err = main_exit(["ssh", "shell"])
    assert code == 0, err
    assert main_exit(["down", "--all", "--yes"])[0] == 0
    assert local_workspaces(cloudgpu_home) == []


@pytest.mark.slow
def test_idle_timeout_tears_down_kept_instance(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: idle\nrun: echo hi\nlimits: {idle_timeout: 2s}\n")
    res = cli_proc(["launch", str(job), "--yes", "--keep"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "kept"
    wait_for(
        lambda: store(cloudgpu_home).job(rec.id).state == "stopped", timeout=60, what="idle reaper"
    )
    assert local_workspaces(cloudgpu_home) == []
    assert "idle for" in Path(rec.log_path).read_text()
