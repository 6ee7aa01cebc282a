"""`cloudgpu launch` on Vast.ai end to end: the plan picks a Vast offer from the bundled
catalog, the provider matches it to an ask listed now, rents it and attaches the job's
key through the loopback REST fake, and the job runs over SSH on a real loopback sshd
standing in for the container.

No test-only branch anywhere: Vast itself reports a container's SSH address as a host
and port (``ssh_host`` / ``ssh_port``), so the fake reports the sshd's, and it authorizes
attached keys the way Vast's SSH runtype does.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.paths import default_paths
from tests.fixtures.vast.server import FakeVast
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, store
from tests.remote.sshd import SSHDServer, start_sshd

pytestmark = pytest.mark.slow

JOB = """\
name: vast-life
resources:
  gpu: RTXA6000:4
  spot: false
  providers: [vast]
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
def fake(sshd: SSHDServer) -> Iterator[FakeVast]:
    server = FakeVast().start()
    server.ssh_host, server.ssh_port = "127.0.0.1", sshd.port
    server.authorized_keys = sshd.dir / "authorized_keys"
    yield server
    server.stop()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """The container's scratch dir; the bootstrap's deadline watchdog there outlives SSH
    (setsid): a real container dies with it, this machine does not, so stop it here."""
    path = tmp_path / "vast-scratch"
    yield path
    pid_file = path / ".cloudgpu" / "deadline.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text().strip()), signal.SIGTERM)


@pytest.fixture
def configured(
    fake: FakeVast,
    sshd: SSHDServer,
    cloudgpu_home: Path,
    tmp_path: Path,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    paths = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).ensure()
    paths.config_file.write_text(
        f'[providers.vast]\napi_url = "{fake.base_url}"\n'
        f'ssh_user = "{sshd.user}"\nscratch_dir = "{scratch}"\npoll_s = 0\n'
        "[launch]\nssh_timeout = 30\n"
    )
    monkeypatch.setenv("VAST_API_KEY", fake.api_key)
    return job_file(tmp_path, JOB)


def test_launch_runs_on_a_vast_container_and_destroys_it(
    configured: Path, fake: FakeVast, cloudgpu_home: Path
) -> None:
    code, out, err = main_exit(["launch", str(configured), "--yes"])
    assert code == 0, err
    assert "ran in" in out and "scratch ok" in out
    (job,) = store(cloudgpu_home).jobs()
    assert job.state == "succeeded" and job.provider == "vast"
    (inst,) = store(cloudgpu_home).instances(job.id)
    assert inst.state == "terminated"
    rents = [r for r in fake.requests if r["method"] == "PUT"]
    assert [r["path"] for r in rents] == ["/asks/20000001/"]  # the Romanian 4x A6000 ask
    assert "$CONTAINER_API_KEY" in rents[0]["body"]["onstart"]  # deadline armed
    assert fake.instances == {} and fake.rented == set()


def test_launch_as_subprocess(configured: Path, fake: FakeVast, cloudgpu_home: Path) -> None:
    res = cli_proc(
        ["launch", str(configured), "--yes"], cloudgpu_home, env={"VAST_API_KEY": fake.api_key}
    )
    assert res.returncode == 0, res.stderr
    assert "ran in" in res.stdout and fake.api_key not in res.stdout + res.stderr
    assert fake.instances == {}


def test_offer_taken_everywhere_fails_cleanly(configured: Path, fake: FakeVast) -> None:
    fake.rented = set(fake.asks)  # every machine rented by someone else
    code, _, err = main_exit(["launch", str(configured), "--yes"])
    assert code != 0 and "Traceback" not in err
    assert fake.instances == {}
