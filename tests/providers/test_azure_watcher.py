"""templates/watchers/azure.sh against a loopback IMDS replaying Scheduled Events."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import cloudgpu.templates as templates_pkg
import pytest

from tests.fixtures.azure.support import fixture
from tests.fixtures.http_fake import serve

WATCHER = Path(templates_pkg.__file__).parent / "watchers" / "azure.sh"
pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")


class _Imds(BaseHTTPRequestHandler):
    pages: ClassVar[list[str]] = []
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Metadata")))
        if self.headers.get("Metadata") != "true":  # IMDS refuses requests without it
            self.send_response(400)
            self.end_headers()
            return
        name = self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]
        data = json.dumps(fixture(name)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def imds() -> Iterator[tuple[str, type[_Imds]]]:
    handler = type("Imds", (_Imds,), {"pages": [], "seen": []})
    with serve(handler) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler


def run_watcher(endpoint: str, notice: Path, polls: int) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "IMDS_ENDPOINT": endpoint,
        "CLOUDGPU_POLL_S": "0",
        "CLOUDGPU_MAX_POLLS": str(polls),
        "CLOUDGPU_NOTICE_FILE": str(notice),
        "CLOUDGPU_ON_NOTICE": f"touch {notice}.flushed",
    }
    return subprocess.run(["sh", str(WATCHER)], env=env, capture_output=True, text=True, timeout=60)


def test_preempt_event_writes_the_notice(imds: tuple[str, type[_Imds]], tmp_path: Path) -> None:
    endpoint, handler = imds
    handler.pages[:] = [
        "scheduled_events_none.json",
        "scheduled_events_none.json",
        "scheduled_events_preempt.json",
    ]
    notice = tmp_path / "run" / "preempt.json"
    result = run_watcher(endpoint, notice, polls=10)
    assert result.returncode == 0, result.stderr
    assert json.loads(notice.read_text()) == {
        "action": "preempt",
        "time": "Tue, 01 Dec 2026 02:05:30 GMT",
        "event_id": "F6A6B1A5-6A4A-4F9B-9B39-3C6D3C1E2F10",
        "source": "azure-scheduled-events",
    }
    assert Path(f"{notice}.flushed").exists()
    assert len(handler.seen) == 3
    assert all(
        p == "/metadata/scheduledevents?api-version=2020-07-01" and h == "true"
        for p, h in handler.seen
    )


def test_no_preempt_event_no_notice(imds: tuple[str, type[_Imds]], tmp_path: Path) -> None:
    endpoint, handler = imds
    handler.pages[:] = ["scheduled_events_none.json"]
    notice = tmp_path / "preempt.json"
    result = run_watcher(endpoint, notice, polls=3)
    assert result.returncode == 1 and not notice.exists()
    assert len(handler.seen) == 3
