"""What scripts and shells rely on: --version, completion (with job ids), colour only
where wanted, and JSON from launch, logs and down (including `down --purge`)."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudgpu.cli import cli
from cloudgpu.cli.style import color_enabled
from cloudgpu.lifecycle.output import JobLog
from cloudgpu.state.store import InstanceRecord
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, store

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_version_flag_through_runner_and_subprocess(cloudgpu_home: Path) -> None:
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == "cloudgpu, version 0.1.0"
    proc = cli_proc(["-V"], cloudgpu_home)
    assert proc.returncode == 0 and "0.1.0" in proc.stdout


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F"),
        ("zsh", "#compdef cloudgpu"),
        ("fish", "complete --no-files --command cloudgpu"),
    ],
)
def test_completion_scripts(shell: str, marker: str) -> None:
    res = CliRunner().invoke(cli, ["completion", shell])
    assert res.exit_code == 0, res.output
    assert marker in res.output and "_CLOUDGPU_COMPLETE" in res.output


def _seed_jobs(home: Path) -> list[str]:
    s = store(home)
    ids = []
    for name in ("alpha", "beta"):
        rec = s.add_job(f"{name}-0a1b2c", name, {}, state="succeeded")
        ids.append(rec.id)
    return ids


def test_job_ids_complete_for_logs_down_ssh_exec(cloudgpu_home: Path) -> None:
    ids = _seed_jobs(cloudgpu_home)
    for command in ("logs", "down", "ssh", "exec", "status"):
        env = {"_CLOUDGPU_COMPLETE": "bash_complete", "COMP_WORDS": f"cloudgpu {command} ",
               "COMP_CWORD": "2"}  # fmt: skip
        proc = cli_proc([], cloudgpu_home, env=env)
        assert proc.returncode == 0, proc.stderr
        got = sorted(line.split(",", 1)[1] for line in proc.stdout.split())
        assert got == sorted(ids), (command, proc.stdout)
    env = {"_CLOUDGPU_COMPLETE": "bash_complete", "COMP_WORDS": "cloudgpu logs be",
           "COMP_CWORD": "2"}  # fmt: skip
    res = CliRunner().invoke(cli, [], env=env, prog_name="cloudgpu")
    assert res.output.split() == ["plain,beta-0a1b2c"]


def test_completion_without_a_state_store_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    env = {"_CLOUDGPU_COMPLETE": "bash_complete", "COMP_WORDS": "cloudgpu logs ",
           "COMP_CWORD": "2"}  # fmt: skip
    proc = cli_proc([], home, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == ""
    assert not home.exists()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_follows_no_color_term_and_tty() -> None:
    tty = _Tty()
    assert color_enabled(tty, {}) is True
    assert color_enabled(tty, {"NO_COLOR": "1"}) is False
    assert color_enabled(tty, {"TERM": "dumb"}) is False
    assert color_enabled(io.StringIO(), {}) is False  # a pipe or a file
    assert color_enabled(io.StringIO(), {"CLICOLOR_FORCE": "1"}) is True
    assert color_enabled(io.StringIO(), {"CLICOLOR_FORCE": "1", "NO_COLOR": "x"}) is False


def test_errors_are_plain_on_a_pipe_coloured_when_forced(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    plain = cli_proc(["plan", missing], tmp_path / "h")
    assert plain.returncode == 2 and plain.stderr.startswith("error: ")
    assert not ANSI.search(plain.stderr)
    forced = cli_proc(["plan", missing], tmp_path / "h", env={"CLICOLOR_FORCE": "1"})
    assert ANSI.search(forced.stderr) and "job file not found" in ANSI.sub("", forced.stderr)
    off = cli_proc(["plan", missing], tmp_path / "h", env={"CLICOLOR_FORCE": "1", "NO_COLOR": "1"})
    assert not ANSI.search(off.stderr)


def test_launch_json_dry_run_and_finished_job(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: js\nrun: echo out-of-the-job\n")
    code, out, err = main_exit(["launch", str(job), "--dry-run", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["launched"] is False and doc["candidates"][0]["provider"] == "local"
    assert "1 of" in err  # the human plan went to stderr
    code, out, err = main_exit(["launch", str(job), "--yes", "--json"])
    assert code == 0, err
    doc = json.loads(out)  # stdout is only the JSON document...
    assert doc["state"] == "succeeded" and doc["provider"] == "local"
    assert doc["follow"] == f"cloudgpu logs {doc['job_id']} -f"
    assert "out-of-the-job" in err  # ...the job's own output went to stderr


def test_launch_json_reports_a_failed_job_and_its_exit_code(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    job = job_file(tmp_path, "name: jf\nrun: exit 7\n")
    code, out, _ = main_exit(["launch", str(job), "--yes", "--json"])
    assert code == 1  # 7 is one of cloudgpu's own codes; the job's is in the JSON
    doc = json.loads(out)
    assert doc["state"] == "failed" and doc["exit_code"] == 7


@pytest.mark.slow
def test_launch_detach_json_says_how_to_follow(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: bg\nrun: echo in-the-background\n")
    proc = cli_proc(["launch", str(job), "--yes", "--detach", "--json"], cloudgpu_home)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["detached"] is True and doc["pid"] > 0
    assert doc["follow"] == f"cloudgpu logs {doc['job_id']} -f"
    logs = cli_proc(["logs", doc["job_id"], "-f", "--json"], cloudgpu_home)
    assert logs.returncode == 0, logs.stderr
    rows = [json.loads(line) for line in logs.stdout.splitlines()]
    assert {r["job"] for r in rows} == {doc["job_id"]}
    assert {"source": "job", "line": "in-the-background"} in [
        {k: r[k] for k in ("source", "line")} for r in rows
    ]
    assert any(r["source"] == "cloudgpu" and r["line"].startswith("terminated") for r in rows)
    assert store(cloudgpu_home).job(doc["job_id"]).state == "succeeded"


def test_logs_json_lines_flush_an_unterminated_last_line(cloudgpu_home: Path) -> None:
    log = cloudgpu_home / "x.log"
    cloudgpu_home.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"[cloudgpu] provisioning\npartial \xff line")
    s = store(cloudgpu_home)
    s.add_job("lj-000001", "lj", {}, log_path=str(log), state="succeeded")
    code, out, _ = main_exit(["logs", "lj", "--json"])
    assert code == 0
    rows = [json.loads(x) for x in out.splitlines()]
    assert [(r["source"], r["line"]) for r in rows] == [
        ("cloudgpu", "provisioning"),
        ("job", "partial \ufffd line"),
    ]


def test_down_json(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(tmp_path, "name: kept\nrun: 'true'\n")
    assert main_exit(["launch", str(job), "--yes", "--keep"])[0] == 0
    code, out, err = main_exit(["down", "kept", "--json", "--yes"])
    assert code == 0, err
    doc = json.loads(out)
    assert [j["state"] for j in doc["jobs"]] == ["stopped"] or doc["jobs"][0]["failures"] == []
    assert doc["failures"] == [] and doc["orphans"] == []
    code, out, _ = main_exit(["down", "--orphans", "--json", "--yes"])
    assert code == 0 and json.loads(out)["orphans"] == []


def _stuck(home: Path) -> str:
    """A job whose instance record points at a provider that no longer exists."""
    s = store(home)
    s.add_job("stuck-00aa11", "stuck", {}, state="kept")
    s.add_instance(
        InstanceRecord(
            id="i-stuck00001", job_id="stuck-00aa11", provider="gonecloud", state="running",
            provider_id="vm-42", instance_type="gpu.8x", region="mars-1", price_per_hour=12.5,
            launched_at=time.time() - 7200,
        )
    )  # fmt: skip
    return "stuck-00aa11"


def test_plain_down_of_a_stuck_record_fails_then_purge_says_what_bills(
    cloudgpu_home: Path,
) -> None:
    job = _stuck(cloudgpu_home)
    code, _, err = main_exit(["down", job, "--yes"])
    assert code != 0 and "gonecloud" in err
    code, _, err = main_exit(["down", "--purge", job])  # not a terminal: needs --yes
    assert code == 2 and "confirm with --yes" in err
    assert store(cloudgpu_home).instances(job, live_only=True)  # nothing dropped yet
    code, out, err = main_exit(["down", "--purge", job, "--yes", "--json"])
    assert code == 0, err
    assert "may still bill: gonecloud vm-42 gpu.8x in mars-1 at $12.5000/h, up 2.0 h" in err
    doc = json.loads(out)
    (billing,) = doc["may_still_bill"]
    assert billing["provider_id"] == "vm-42" and 24.9 < billing["estimated_cost"] < 25.5
    s = store(cloudgpu_home)
    assert s.instances(job, live_only=True) == []
    assert s.job(job).state == "stopped"
    assert "instance_purged" in [e["kind"] for e in s.events(job)]
    code, out, _ = main_exit(["down", "--all"])  # nothing left that anything would retry
    assert code == 0 and "nothing to bring down" in out


def test_purge_refuses_a_job_whose_process_is_alive(cloudgpu_home: Path) -> None:
    s = store(cloudgpu_home)
    s.add_job("live-00bb22", "live", {}, state="running")
    s.update_job("live-00bb22", pid=os.getppid())  # some live process
    code, _, err = main_exit(["down", "--purge", "live-00bb22", "--yes"])
    assert code != 0 and "still driven by its process" in err
    assert s.job("live-00bb22").state == "running"


def test_details_go_to_the_log_and_to_the_terminal_only_when_verbose(tmp_path: Path) -> None:
    for verbose in (False, True):
        err = io.BytesIO()
        log = JobLog(tmp_path / f"{verbose}.log", verbose=verbose, out=io.BytesIO(), err=err)
        log.info("nvme=/x free_gb=80 devices=0", detail=True)
        log.info("provisioning")
        log.close()
        assert "nvme=/x" in (tmp_path / f"{verbose}.log").read_text()
        assert (b"nvme=/x" in err.getvalue()) is verbose
        assert b"provisioning" in err.getvalue()


def test_launch_hides_the_bootstrap_line_unless_verbose(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    job = job_file(tmp_path, "name: quiet\nrun: 'true'\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0 and "free_gb=" not in err
    code, _, err = main_exit(["launch", str(job), "--yes", "-v"])
    assert code == 0 and "free_gb=" in err
