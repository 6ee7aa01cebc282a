"""templates/watchers/azure.sh against a loopback IMDS serving Scheduled Events
(tests/fixtures/azure/imds.py): no event, then a Preempt for this VM; events for other
VMs are not ours; the event is acknowledged (StartRequests) only after the lifecycle's
flush says so, and never without it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import cloudgpu.templates as templates_pkg
import pytest

from tests.fixtures.azure.imds import AzureImds

WATCHER = Path(templates_pkg.__file__).parent / "watchers" / "azure.sh"
pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")


@pytest.fixture
def imds() -> Iterator[AzureImds]:
    with AzureImds() as server:
        yield server


def start(imds: AzureImds, tmp_path: Path, **extra: str) -> tuple[subprocess.Popen[str], Path]:
    notice = tmp_path / "run" / "preempt.json"
    env = {
        "PATH": "/usr/bin:/bin",
        "IMDS_ENDPOINT": imds.endpoint,
        "CLOUDGPU_POLL_S": "0.1",
        "CLOUDGPU_NOTICE_FILE": str(notice),
        "CLOUDGPU_NOTICE_ACK": str(tmp_path / "run" / "notice.handled"),
        "CLOUDGPU_VM_NAME": "job-spot",
        **extra,
    }
    return subprocess.Popen(["sh", str(WATCHER)], env=env, text=True), notice


def wait_file(path: Path, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert path.exists(), path


def test_preempt_is_noticed_then_acknowledged_after_the_flush(
    imds: AzureImds, tmp_path: Path
) -> None:
    proc, notice = start(imds, tmp_path)
    try:
        time.sleep(0.5)
        assert not notice.exists()  # absent: no event
        imds.preempt("cgpu-other")  # another VM's eviction is not ours
        time.sleep(0.5)
        assert not notice.exists()
        event = imds.preempt("job-spot")
        wait_file(notice)
        data = json.loads(notice.read_text())
        assert data["action"] == "preempt" and data["detail"] == event
        assert data["source"] == "azure-scheduled-events" and data["time"].endswith("GMT")
        time.sleep(0.5)
        assert imds.started == []  # not before the checkpoint is flushed
        (tmp_path / "run" / "notice.handled").touch()
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert imds.started == [event]
    assert all(
        p == "/metadata/scheduledevents?api-version=2020-07-01" and h == "true"
        for p, h in imds.gets
    )


def test_without_the_ack_the_event_is_left_alone(imds: AzureImds, tmp_path: Path) -> None:
    imds.preempt("job-spot")
    proc, notice = start(imds, tmp_path, CLOUDGPU_ACK_WAIT_S="1")
    assert proc.wait(30) == 0 and notice.exists()
    assert imds.started == []


def test_no_preempt_event_no_notice(imds: AzureImds, tmp_path: Path) -> None:
    proc, notice = start(imds, tmp_path, CLOUDGPU_MAX_POLLS="3")
    assert proc.wait(30) == 1 and not notice.exists()
    assert len(imds.gets) == 3
