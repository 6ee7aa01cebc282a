"""templates/watchers/gcp.sh run by a real shell against a loopback metadata server that
answers like GCE's (tests/fixtures/gcp/metadata.py): no notice while preempted is FALSE,
the notice within a second of it turning TRUE (a hanging GET, not a poll), and host
maintenance, which ends GPU VMs too."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from tests.fixtures.gcp.metadata import GceMetadata

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


@pytest.fixture
def metadata() -> Iterator[GceMetadata]:
    with GceMetadata() as m:
        yield m


def start_watcher(
    metadata: GceMetadata, tmp_path: Path, **env: str
) -> tuple[subprocess.Popen[bytes], Path]:
    script = resources.files("cloudgpu.templates").joinpath("watchers/gcp.sh")
    notice = tmp_path / "run" / "preempt.json"
    proc = subprocess.Popen(
        ["sh", str(script)],
        env={
            "PATH": "/usr/bin:/bin",
            "GCE_METADATA_HOST": metadata.host,
            "CLOUDGPU_NOTICE_FILE": str(notice),
            "CLOUDGPU_POLL_S": "0.1",
            **env,
        },
    )
    return proc, notice


def test_no_notice_while_not_preempted(metadata: GceMetadata, tmp_path: Path) -> None:
    proc, notice = start_watcher(metadata, tmp_path, CLOUDGPU_WAIT_S="1", CLOUDGPU_MAX_POLLS="3")
    assert proc.wait(60) == 1 and not notice.exists()
    assert set(metadata.flavors) == {"Google"}
    assert metadata.hanging_gets == 2  # the first read, then it waits for a change


def test_preemption_is_seen_within_a_second_of_the_change(
    metadata: GceMetadata, tmp_path: Path
) -> None:
    proc, notice = start_watcher(metadata, tmp_path, CLOUDGPU_WAIT_S="30")
    try:
        deadline = time.monotonic() + 20
        while metadata.hanging_gets == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metadata.hanging_gets == 1  # absent: it is holding a hanging GET
        changed = time.monotonic()
        metadata.set("preempted", "TRUE")  # present
        assert proc.wait(20) == 0
        assert time.monotonic() - changed < 2
    finally:
        if proc.poll() is None:
            proc.kill()
    data = json.loads(notice.read_text())
    assert data["action"] == "preempt" and data["source"] == "gcp-metadata"
    assert data["time"].endswith("Z")


def test_host_maintenance_on_a_gpu_vm_is_a_notice(metadata: GceMetadata, tmp_path: Path) -> None:
    metadata.set("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    proc, notice = start_watcher(metadata, tmp_path, CLOUDGPU_WAIT_S="1", CLOUDGPU_MAX_POLLS="3")
    assert proc.wait(60) == 0 and json.loads(notice.read_text())["action"] == "maintenance"


def test_it_stops_at_the_deadline(metadata: GceMetadata, tmp_path: Path) -> None:
    past = str(int(time.time()) - 1)
    proc, notice = start_watcher(metadata, tmp_path, CLOUDGPU_WAIT_S="1", CLOUDGPU_DEADLINE=past)
    assert proc.wait(60) == 1 and not notice.exists()
