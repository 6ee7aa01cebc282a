"""What a job on `local` can reach: its declared env and cloudgpu's variables (never the
client's credentials), its workspace (never a host path), and nothing it starts outlives
teardown, not even a child that clears its environment and detaches. Logs and state
files are the owner's only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cloudgpu.builtin.procs import tagged_pids
from cloudgpu.remote import LocalMachine
from tests.lifecycle.helpers import job_file, local_workspaces, main_exit, store, wait_for

SECRETS = {
    "GITHUB_TOKEN": "ghp_" + "a" * 36,
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "MY_APP_PASSWORD": "hunter2-not-for-jobs",
}


def test_the_job_sees_its_env_and_cloudgpus_not_the_clients(
    tmp_path: Path, cloudgpu_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    job = job_file(
        tmp_path,
        "name: envdump\nresources: {gpu: none}\nenv: {WANTED: yes-please}\n"
        "run: env | sort > $CLOUDGPU_NVME/env.txt; cat $CLOUDGPU_NVME/env.txt\n",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert seen["WANTED"] == "yes-please" and seen["CLOUDGPU_JOB"].startswith("envdump-")
    assert "CLOUDGPU_NVME" in seen and "PATH" in seen
    for k, v in SECRETS.items():
        assert k not in seen and v not in out
    (rec,) = store(cloudgpu_home).jobs()
    log = Path(rec.log_path)
    assert "WANTED=yes-please" in log.read_text()
    for v in SECRETS.values():
        assert v not in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(store(cloudgpu_home).path.stat().st_mode) == 0o600


def test_a_detached_env_cleared_child_does_not_outlive_teardown(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    pidfile = tmp_path / "escapee.pid"
    job = job_file(
        tmp_path,
        "name: escape\nresources: {gpu: none}\nrun: |\n"
        f"  env -i setsid sh -c 'echo $$ > {pidfile}; exec sleep 600' "
        "</dev/null >/dev/null 2>&1 &\n"
        f"  while [ ! -s {pidfile} ]; do sleep 0.05; done\n"
        "  echo started\n",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0 and "started" in out, err
    pid = int(pidfile.read_text())
    # No CLOUDGPU_INSTANCE in its environment, its own session, and still it is gone.
    wait_for(lambda: not _alive(pid), timeout=10, what="the detached child to be stopped")
    assert local_workspaces(cloudgpu_home) == []
    (inst,) = store(cloudgpu_home).instances()
    assert tagged_pids(inst.provider_id or inst.id) == []


def test_stopping_a_run_stops_its_detached_children(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    pidfile = tmp_path / "bg.pid"
    command = (
        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 600' </dev/null >/dev/null 2>&1 & sleep 600"
    )
    rc = m.run(command, timeout=2)
    assert rc != 0
    wait_for(lambda: pidfile.exists() and not _alive(int(pidfile.read_text())), timeout=10)


@pytest.mark.parametrize("dst", ["/etc/cloudgpu-test", "/", "/nvme/../etc", "/root/x"])
def test_data_outside_nvme_is_refused_before_anything_is_created(
    tmp_path: Path, cloudgpu_home: Path, dst: str
) -> None:
    (tmp_path / "d").mkdir()
    job = job_file(
        tmp_path,
        f"name: out\nresources: {{gpu: none}}\ndata: [{{src: ./d, dst: '{dst}'}}]\nrun: 'true'\n",
    )
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 2 and "data[0].dst" in err and "under /nvme" in err, err
    assert not (cloudgpu_home / "data" / "state.db").exists()
    assert local_workspaces(cloudgpu_home) == [] and not Path("/etc/cloudgpu-test").exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
