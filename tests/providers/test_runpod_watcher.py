"""templates/watchers/runpod.sh run by a real shell against the loopback RunPod fake, and
RunPodProvider.preemption_notice() reading the same maintenance window from outside."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from cloudgpu_providers.runpod import RunPodProvider

from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from tests.fixtures.runpod.server import FakeRunPod
from tests.providers.contract import ProviderContract


@pytest.fixture
def fake() -> Iterator[FakeRunPod]:
    server = FakeRunPod().start()
    yield server
    server.stop()


@pytest.fixture
def provider(fake: FakeRunPod, paths: Paths) -> RunPodProvider:
    env = {"RUNPOD_API_KEY": fake.api_key, "RUNPOD_API_BASE_URL": fake.base_url}
    return RunPodProvider(ProviderContext(config={"poll_s": 0}, paths=paths, env=env))


@pytest.fixture
def pod_id(provider: RunPodProvider) -> str:
    offer = next(o for o in provider.fetch_offers() if o.gpu == "RTX4090")
    return provider.create(ProviderContract().request(offer)).id


def run_watcher(fake: FakeRunPod, tmp_path: Path, pod: str, **extra: str) -> tuple[int, Path]:
    script = resources.files("cloudgpu.templates").joinpath("watchers/runpod.sh")
    notice = tmp_path / "run" / "preempt.json"
    env = {
        "PATH": "/usr/bin:/bin",
        "RUNPOD_API_KEY": fake.api_key,
        "RUNPOD_API_BASE_URL": fake.base_url,
        "RUNPOD_POD_ID": pod,
        "CLOUDGPU_NOTICE_FILE": str(notice),
        "CLOUDGPU_POLL_S": "0",
        "CLOUDGPU_MAX_POLLS": "2",
        **extra,
    }
    proc = subprocess.run(["sh", str(script)], env=env, timeout=60, capture_output=True)
    return proc.returncode, notice


def test_running_pod_gives_no_notice(fake: FakeRunPod, tmp_path: Path, pod_id: str) -> None:
    rc, notice = run_watcher(fake, tmp_path, pod_id)
    assert rc == 1 and not notice.exists()
    # It asked about its own pod, with the key in the header only.
    asked = [r for r in fake.requests if r["operation"] == "pod"][-1]
    assert asked["auth"] == f"Bearer {fake.api_key}" and fake.api_key not in asked["path"]


def test_maintenance_window_is_a_notice(fake: FakeRunPod, tmp_path: Path, pod_id: str) -> None:
    fake.pods[pod_id]["machine"]["maintenanceStart"] = "2026-12-01T03:00:00Z"
    rc, notice = run_watcher(fake, tmp_path, pod_id)
    assert rc == 0
    data = json.loads(notice.read_text())
    assert data["action"] == "maintenance" and data["detail"] == "2026-12-01T03:00:00Z"


def test_stopped_pod_is_a_notice(fake: FakeRunPod, tmp_path: Path, pod_id: str) -> None:
    fake.pods[pod_id]["desiredStatus"] = "EXITED"
    rc, notice = run_watcher(fake, tmp_path, pod_id)
    assert rc == 0 and json.loads(notice.read_text())["detail"] == "EXITED"


def test_deadline_removes_the_pod(fake: FakeRunPod, tmp_path: Path, pod_id: str) -> None:
    # Stands in for runpodctl: the same podTerminate call, against the loopback API.
    ctl = tmp_path / "runpodctl"
    body = (
        '{"query": "mutation T($input: PodTerminateInput!) { podTerminate(input: $input) }", '
        '"variables": {"input": {"podId": "\'"$3"\'"}}}'
    )
    ctl.write_text(
        "#!/bin/sh\n"
        f"curl -sf -H \"Authorization: Bearer $RUNPOD_API_KEY\" -d '{body}' "
        '"$RUNPOD_API_BASE_URL/graphql" >/dev/null\n'
    )
    ctl.chmod(0o755)
    past = str(int(time.time()) - 5)
    rc, notice = run_watcher(
        fake, tmp_path, pod_id, CLOUDGPU_DEADLINE=past, RUNPODCTL=str(ctl), CLOUDGPU_MAX_POLLS="1"
    )
    assert pod_id not in fake.pods
    assert rc == 1 and not notice.exists()  # gone, not "stopping": nothing left to warn


def test_provider_reads_a_near_maintenance_window(
    provider: RunPodProvider, fake: FakeRunPod, pod_id: str
) -> None:
    inst = provider.describe(pod_id)
    assert provider.preemption_notice(inst) is None
    provider._notice_checked.clear()  # the 10 s rate limit, not what this test is about
    soon = time.time() + 120
    fake.pods[pod_id]["machine"]["maintenanceStart"] = int(soon * 1000)
    assert provider.preemption_notice(inst) == pytest.approx(soon, abs=1)
    provider._notice_checked.clear()
    fake.pods[pod_id]["machine"]["maintenanceStart"] = "2099-01-01T00:00:00Z"
    assert provider.preemption_notice(inst) is None
