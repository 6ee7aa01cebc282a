"""`cloudgpu launch` on RunPod end to end: the plan picks a RunPod offer from the bundled
catalog, the provider deploys a pod through the loopback GraphQL fake, and the job runs
over SSH on a real loopback sshd standing in for the pod.

No test-only branch anywhere: RunPod itself reports a pod's SSH address as a public IP
and a mapped port (``runtime.ports``), so the fake reports the sshd's 127.0.0.1:port, and
it authorizes the pod's PUBLIC_KEY the way RunPod images' start script does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.runpod.server import FakeRunPod
from tests.providers.conftest import ApiLaunch
from tests.providers.lifecycle_kit import (
    launch_fails_cleanly,
    launch_in_subprocess,
    launch_job,
    launch_succeeds,
    machines_on,
)
from tests.remote.sshd import SSHDServer

pytestmark = pytest.mark.slow

JOB = launch_job("rp-life", "RTX4090", "runpod")


@pytest.fixture
def fake(sshd: SSHDServer) -> Iterator[FakeRunPod]:
    with machines_on(FakeRunPod(), sshd) as server:
        yield server


@pytest.fixture
def configured(fake: FakeRunPod, api_launch: ApiLaunch) -> Path:
    return api_launch(fake, "runpod", "api_base_url", "RUNPOD_API_KEY", JOB)


def test_launch_runs_on_a_runpod_pod_and_terminates_it(
    configured: Path, fake: FakeRunPod, cloudgpu_home: Path
) -> None:
    _, _, out = launch_succeeds(configured, cloudgpu_home, "runpod")
    assert "scratch ok" in out
    deploys = [r for r in fake.requests if r["operation"] == "podFindAndDeployOnDemand"]
    assert len(deploys) == 1
    sent = deploys[0]["variables"]["input"]
    assert sent["gpuTypeId"] == "NVIDIA GeForce RTX 4090"
    assert 'runpodctl remove pod "$RUNPOD_POD_ID"' in sent["dockerArgs"]  # deadline armed
    assert fake.pods == {}  # torn down and verified gone


def test_launch_as_subprocess(configured: Path, fake: FakeRunPod, cloudgpu_home: Path) -> None:
    env = {"RUNPOD_API_KEY": fake.api_key}
    launch_in_subprocess(configured, cloudgpu_home, env, fake.api_key)
    assert fake.pods == {}


def test_no_capacity_anywhere_fails_cleanly(
    configured: Path, fake: FakeRunPod, cloudgpu_home: Path
) -> None:
    fake.capacity = False
    launch_fails_cleanly(configured)
    assert fake.pods == {}
