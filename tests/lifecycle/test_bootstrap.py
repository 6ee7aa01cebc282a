"""templates/bootstrap.sh on this machine: NVMe dir prepared, deadline stops the job."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cloudgpu.builtin.procs import tagged_pids
from cloudgpu.lifecycle.bootstrap import bootstrap, script
from cloudgpu.provider import Capabilities
from cloudgpu.remote import LocalMachine
from tests.lifecycle.helpers import wait_for


def test_script_is_valid_sh() -> None:
    subprocess.run(["sh", "-n", "-c", script()], check=True)


def test_prepares_nvme_dir_without_formatting(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    line = bootstrap(m, "inst-a", Capabilities(remote=False), None)
    assert line.startswith(f"nvme={m.nvme_path} ") and "devices=0" in line
    assert not (Path(m.nvme_path) / ".cloudgpu" / "deadline.pid").exists()


def test_deadline_stops_tagged_processes_with_no_client(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    iid = f"inst-{time.monotonic_ns()}"
    bootstrap(m, iid, Capabilities(remote=False), time.time() + 2)
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={"CLOUDGPU_INSTANCE": iid, "PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    assert tagged_pids(iid) == [job.pid]
    wait_for(lambda: job.poll() is not None, timeout=30, what="deadline to stop the job")
    assert (Path(m.nvme_path) / ".cloudgpu" / "deadline.fired").exists()
    assert tagged_pids(iid) == []
