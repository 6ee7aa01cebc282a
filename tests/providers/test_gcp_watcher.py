"""templates/watchers/gcp.sh run by a real shell against a loopback metadata server that
answers like GCE's (values as text/plain, and 403 without the Metadata-Flavor header)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.http_fake import ServerThread

# https://cloud.google.com/compute/docs/metadata/querying-metadata: values are plain text;
# a request without "Metadata-Flavor: Google" is refused with 403.
METADATA = {
    "/computeMetadata/v1/instance/preempted": "FALSE",
    "/computeMetadata/v1/instance/maintenance-event": "NONE",
}


class Metadata(ServerThread):
    def __init__(self) -> None:
        self.values = dict(METADATA)
        self.flavors: list[str | None] = []
        meta = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                flavor = self.headers.get("Metadata-Flavor")
                meta.flavors.append(flavor)
                value = meta.values.get(self.path.split("?")[0])
                code = 403 if flavor != "Google" else (200 if value is not None else 404)
                raw = (value or "").encode()
                self.send_response(code)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_port}"


@pytest.fixture
def metadata() -> Iterator[Metadata]:
    with Metadata() as m:
        yield m


def run_watcher(metadata: Metadata, tmp_path: Path, polls: int) -> tuple[int, Path]:
    script = resources.files("cloudgpu.templates").joinpath("watchers/gcp.sh")
    notice = tmp_path / "run" / "preempt.json"
    env = {
        "PATH": "/usr/bin:/bin",
        "GCE_METADATA_HOST": metadata.host,
        "CLOUDGPU_NOTICE_FILE": str(notice),
        "CLOUDGPU_ON_NOTICE": f"echo flushed > {tmp_path / 'hook'}",
        "CLOUDGPU_POLL_S": "0",
        "CLOUDGPU_MAX_POLLS": str(polls),
    }
    proc = subprocess.run(["sh", str(script)], env=env, timeout=60, capture_output=True)
    return proc.returncode, notice


def test_no_notice_while_not_preempted(metadata: Metadata, tmp_path: Path) -> None:
    rc, notice = run_watcher(metadata, tmp_path, polls=3)
    assert rc == 1 and not notice.exists()
    assert set(metadata.flavors) == {"Google"}


def test_preempted_writes_notice_and_runs_hook(metadata: Metadata, tmp_path: Path) -> None:
    metadata.values["/computeMetadata/v1/instance/preempted"] = "TRUE"
    rc, notice = run_watcher(metadata, tmp_path, polls=3)
    assert rc == 0
    data = json.loads(notice.read_text())
    assert data["action"] == "preempt" and data["source"] == "gcp-metadata"
    assert data["time"].endswith("Z")
    assert (tmp_path / "hook").read_text().strip() == "flushed"


def test_host_maintenance_on_a_gpu_vm_is_a_notice(metadata: Metadata, tmp_path: Path) -> None:
    metadata.values["/computeMetadata/v1/instance/maintenance-event"] = (
        "TERMINATE_ON_HOST_MAINTENANCE"
    )
    rc, notice = run_watcher(metadata, tmp_path, polls=2)
    assert rc == 0 and json.loads(notice.read_text())["action"] == "maintenance"
