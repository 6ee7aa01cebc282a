"""`cloudgpu launch` on RunPod end to end: the plan picks a RunPod offer from the bundled
catalog, the provider deploys a pod through the loopback GraphQL fake, and the job runs
over SSH on a real loopback sshd standing in for the pod.

No test-only branch anywhere: RunPod itself reports a pod's SSH address as a public IP
and a mapped port (``runtime.ports``), so the fake reports the sshd's 127.0.0.1:port, and
it authorizes the pod's PUBLIC_KEY the way RunPod images' start script does.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.paths import default_paths
from tests.fixtures.runpod.server import FakeRunPod
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, store
from tests.remote.sshd import SSHDServer, start_sshd

pytestmark = pytest.mark.slow

JOB = """\
name: rp-life
resources:
  gpu: RTX4090
  spot: false
  providers: [runpod]
run: |
  echo "ran in $CLOUDGPU_INSTANCE"
  test -d "$CLOUDGPU_NVME" && echo "scratch ok"
limits:
  max_runtime: 5m
  max_cost: 5
"""


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SSHDServer]:
    server = start_sshd(tmp_path / "sshd")
    yield server
    server.stop()


@pytest.fixture
def fake(sshd: SSHDServer) -> Iterator[FakeRunPod]:
    server = FakeRunPod().start()
    server.ssh_host, server.ssh_port = "127.0.0.1", sshd.port
    server.authorized_keys = sshd.dir / "authorized_keys"
    yield server
    server.stop()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """The pod's scratch dir. The bootstrap arms a deadline watchdog there (setsid, to
    outlive SSH); a real pod dies with it, this machine does not, so stop it here."""
    path = tmp_path / "pod-scratch"
    yield path
    pid_file = path / ".cloudgpu" / "deadline.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text().strip()), signal.SIGTERM)


@pytest.fixture
def configured(
    fake: FakeRunPod,
    sshd: SSHDServer,
    cloudgpu_home: Path,
    tmp_path: Path,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    paths = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).ensure()
    paths.config_file.write_text(
        f'[providers.runpod]\napi_base_url = "{fake.base_url}"\n'
        f'ssh_user = "{sshd.user}"\nscratch_dir = "{scratch}"\npoll_s = 0\n'
        "[launch]\nssh_timeout = 30\n"
    )
    monkeypatch.setenv("RUNPOD_API_KEY", fake.api_key)
    return job_file(tmp_path, JOB)


def test_launch_runs_on_a_runpod_pod_and_terminates_it(
    configured: Path, fake: FakeRunPod, cloudgpu_home: Path
) -> None:
    code, out, err = main_exit(["launch", str(configured), "--yes"])
    assert code == 0, err
    assert "ran in" in out and "scratch ok" in out
    (job,) = store(cloudgpu_home).jobs()
    assert job.state == "succeeded" and job.provider == "runpod"
    (inst,) = store(cloudgpu_home).instances(job.id)
    assert inst.state == "terminated"
    deploys = [r for r in fake.requests if r["operation"] == "podFindAndDeployOnDemand"]
    assert len(deploys) == 1
    sent = deploys[0]["variables"]["input"]
    assert sent["gpuTypeId"] == "NVIDIA GeForce RTX 4090"
    assert 'runpodctl remove pod "$RUNPOD_POD_ID"' in sent["dockerArgs"]  # deadline armed
    assert fake.pods == {}  # torn down and verified gone


def test_launch_as_subprocess(configured: Path, fake: FakeRunPod, cloudgpu_home: Path) -> None:
    res = cli_proc(
        ["launch", str(configured), "--yes"], cloudgpu_home, env={"RUNPOD_API_KEY": fake.api_key}
    )
    assert res.returncode == 0, res.stderr
    assert "ran in" in res.stdout
    assert fake.api_key not in res.stdout + res.stderr
    assert fake.pods == {}


def test_no_capacity_anywhere_fails_cleanly(
    configured: Path, fake: FakeRunPod, cloudgpu_home: Path
) -> None:
    fake.capacity = False
    code, _, err = main_exit(["launch", str(configured), "--yes"])
    assert code != 0
    assert "Traceback" not in err
    assert fake.pods == {}
