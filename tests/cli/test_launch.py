"""`cloudgpu launch` end to end on the local provider (no cloud account needed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lifecycle.helpers import (
    cli_proc,
    job_file,
    local_workspaces,
    main_exit,
    quickstart,
    status_json,
    store,
    wait_for,
)


def test_quickstart_on_local(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = quickstart(tmp_path)
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert "read poems.txt: 27 words" in out
    summary = json.loads((tmp_path / "quickstart-results" / "summary.json").read_text())
    assert summary["poems.txt"]["words"] == 27
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "succeeded" and rec.exit_code == 0 and rec.provider == "local"
    insts = store(cloudgpu_home).instances(rec.id)
    assert [i.state for i in insts] == ["terminated"]
    assert local_workspaces(cloudgpu_home) == []
    log = Path(rec.log_path).read_text()
    assert "read poems.txt" in log and "terminated" in log
    assert [s.instance_id for s in store(cloudgpu_home).spend(job_id=rec.id)] == [insts[0].id]


def test_quickstart_as_subprocess(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = quickstart(tmp_path)
    res = cli_proc(["launch", str(job), "--yes"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    assert "wrote" in res.stdout
    (row,) = status_json(cloudgpu_home)
    assert row["state"] == "succeeded" and row["provider"] == "local"
    assert row["instance_type"] == "local" and row["cost"] == 0
    assert [i["state"] for i in row["instances"]] == ["terminated"]
    # Re-running reuses nothing remote, and still leaves no workspace behind.
    assert local_workspaces(cloudgpu_home) == []


def test_run_failure_propagates_exit_code(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: fails\nresources: {gpu: none}\nrun: echo boom; exit 9\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 9
    line = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "exit code 9" in line[0] and "log:" in line[0]
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "failed" and rec.exit_code == 9
    assert "boom" in Path(rec.log_path).read_text()
    assert local_workspaces(cloudgpu_home) == []


def test_setup_failure(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: badsetup\nsetup: exit 3\nrun: echo never\n")
    code, out, err = main_exit(["launch", str(job), "--yes"])
    # 3 is one of cloudgpu's own codes: it exits 1, and says the job's own.
    assert code == 1 and "setup failed with exit code 3" in err
    assert "cloudgpu exits 1: 3 is one of its own codes" in err
    assert "never" not in out
    assert local_workspaces(cloudgpu_home) == []


def test_impossible_resources_name_the_closest(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: big\nresources: {gpu: H100:8, providers: [local]}\nrun: x\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 2
    assert "no offer fits" in err and "closest is local" in err and "no GPU" in err
    assert "Traceback" not in err
    assert store(cloudgpu_home).jobs() == []


def test_unknown_gpu_did_you_mean(tmp_path: Path) -> None:
    job = job_file(tmp_path, "name: typo\nresources: {gpu: H10O}\nrun: x\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 2 and "unknown GPU" in err and "did you mean" in err


def test_missing_data_path_one_line(tmp_path: Path) -> None:
    job = job_file(tmp_path, "name: d\nrun: x\ndata:\n  - {src: ./gone, dst: /nvme/d}\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 2
    assert (
        err.strip()
        .splitlines()[0]
        .endswith(f"data[0].src: local path does not exist: {tmp_path / 'gone'}")
    )


def test_dry_run_and_confirmation(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = quickstart(tmp_path)
    code, out, _ = main_exit(["launch", str(job), "--dry-run"])
    assert code == 0 and "<- launch" in out and "dry run" in out
    code, _, err = main_exit(["launch", str(job)])  # CliRunner's stdin is not a tty
    assert code == 2 and "--yes" in err
    assert store(cloudgpu_home).jobs() == []


def test_max_runtime_stops_and_tears_down(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(
        tmp_path,
        "name: slow\nrun: echo started; sleep 60\nlimits: {max_runtime: 2s}\n",
    )
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 6 and "max_runtime" in err
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "stopped"
    assert local_workspaces(cloudgpu_home) == []


def test_max_cost_stops(tmp_path: Path, cloudgpu_home: Path) -> None:
    cfg = cloudgpu_home / "config" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("[providers.local]\nprice_per_hour = 3600.0\n")  # $1 per second
    job = job_file(tmp_path, "name: pricey\nrun: sleep 60\nlimits: {max_cost: 2}\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 6 and "max_cost" in err
    (row,) = status_json(cloudgpu_home)
    assert row["state"] == "stopped" and row["cost"] >= 2
    assert local_workspaces(cloudgpu_home) == []


def test_keep_exec_down(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: kept\nrun: echo hello > $CLOUDGPU_NVME/hello.txt\n")
    code, _, err = main_exit(["launch", str(job), "--yes", "--keep"])
    assert code == 0, err
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "kept" and len(local_workspaces(cloudgpu_home)) == 1
    code, out, _ = main_exit(["exec", rec.id, "--", "sh", "-c", "cat $CLOUDGPU_NVME/hello.txt"])
    assert code == 0 and out == "hello\n"
    code, _, _ = main_exit(["exec", rec.id, "--", "sh", "-c", "exit 4"])
    assert code == 4
    code, out, _ = main_exit(["down", rec.id, "--yes"])
    assert code == 0 and "down" in out
    assert store(cloudgpu_home).job(rec.id).state == "stopped"
    assert local_workspaces(cloudgpu_home) == []
    code, _, err = main_exit(["exec", rec.id, "--", "true"])
    assert code != 0 and "no running instance" in err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_signal_tears_down(tmp_path: Path, cloudgpu_home: Path, sig: int) -> None:
    job = job_file(tmp_path, "name: term\nrun: echo started; sleep 120\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env={**os.environ, "CLOUDGPU_HOME": str(cloudgpu_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(
        lambda: any(j.state == "running" for j in store(cloudgpu_home).jobs()), what="job running"
    )
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "interrupted"
    assert local_workspaces(cloudgpu_home) == []
    assert [i.state for i in store(cloudgpu_home).instances(rec.id)] == ["terminated"]


def detached_id(stdout: str) -> str:
    m = re.search(r"^job (\S+) continues in the background", stdout, re.M)
    assert m, stdout
    return m.group(1)


@pytest.mark.slow
def test_detach_logs_follow_and_down(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: bg\nrun: echo started; sleep 1; echo finished\n")
    res = cli_proc(["launch", str(job), "--yes", "--detach"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    job_id = detached_id(res.stdout)
    follow = cli_proc(["logs", job_id, "-f"], cloudgpu_home, timeout=120)
    assert "started" in follow.stdout and "finished" in follow.stdout
    assert "[cloudgpu] total cost" in follow.stdout  # followed through the teardown
    wait_for(lambda: store(cloudgpu_home).job(job_id).state == "succeeded", what="done")
    # A long one, stopped by `down` while it runs.
    job = job_file(tmp_path, "name: bg2\nrun: echo up; sleep 120\n", "long.yaml")
    res = cli_proc(["launch", str(job), "--yes", "--detach"], cloudgpu_home)
    job_id = detached_id(res.stdout)
    wait_for(lambda: store(cloudgpu_home).job(job_id).state == "running", what="running")
    res = cli_proc(["down", job_id, "--yes"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    rec = store(cloudgpu_home).job(job_id)
    assert rec.state in ("interrupted", "stopped")
    assert local_workspaces(cloudgpu_home) == []


@pytest.mark.slow
def test_kill9_then_orphans(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: crash\nrun: echo up; sleep 120\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env={**os.environ, "CLOUDGPU_HOME": str(cloudgpu_home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(
        lambda: any(j.state == "running" for j in store(cloudgpu_home).jobs()), what="job running"
    )
    proc.kill()
    proc.wait()
    assert len(local_workspaces(cloudgpu_home)) == 1
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    assert "1 orphan(s) removed" in res.stdout
    assert local_workspaces(cloudgpu_home) == []
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "failed"
    assert [i.state for i in store(cloudgpu_home).instances(rec.id)] == ["terminated"]


def test_invalid_yaml_and_unknown_key_are_one_line(tmp_path: Path) -> None:
    bad = job_file(tmp_path, "name: x\nrun: [oops\n", "bad.yaml")
    code, _, err = main_exit(["launch", str(bad), "--yes"])
    assert code == 2 and err.startswith(f"error: {bad}:") and "invalid YAML" in err
    typo = job_file(tmp_path, "name: x\nrun: y\nresorces: {gpu: L4}\n", "typo.yaml")
    code, _, err = main_exit(["launch", str(typo), "--yes"])
    assert code == 2
    assert err.splitlines()[0] == (
        f"error: {typo}:3: resorces: unknown key; did you mean 'resources'? expected one of: "
        "checkpoint, data, env, limits, name, num_nodes, outputs, resources, run, setup, "
        "workload"
    )


def test_detached_process_records_early_failure(tmp_path: Path, cloudgpu_home: Path) -> None:
    s = store(cloudgpu_home)
    s.add_job("bg-123456", "bg", {}, log_path=str(cloudgpu_home / "bg.log"))
    bad = job_file(tmp_path, "name: bg\nrun: x\ndata: [{src: ./gone, dst: /nvme/x}]\n")
    code, _, err = main_exit(["launch", str(bad), "--yes", "--foreground-of", "bg-123456"])
    assert code == 2 and "does not exist" in err
    rec = store(cloudgpu_home).job("bg-123456")
    assert rec.state == "failed" and "does not exist" in rec.error


def test_failed_run_still_brings_outputs_back(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(
        tmp_path,
        "name: partial\nrun: mkdir -p $CLOUDGPU_NVME/out; echo half > $CLOUDGPU_NVME/out/p.txt;"
        " exit 9\noutputs: [{src: /nvme/out, dst: ./results}]\n",
    )
    code, _, _ = main_exit(["launch", str(job), "--yes"])
    assert code == 9
    assert (tmp_path / "results" / "p.txt").read_text() == "half\n"  # nothing lost
    assert local_workspaces(cloudgpu_home) == []
