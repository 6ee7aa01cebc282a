"""The instance-side AWS spot watcher (templates/watchers/aws.sh) against a loopback
IMDSv2: token first, then spot/instance-action, whose 200 body is the notice
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import cloudgpu.templates
import pytest

from tests.providers.aws_fixtures.servers import imds_server, url_of

WATCHER = Path(cloudgpu.templates.__file__).parent / "watchers" / "aws.sh"
NOTICE = {"action": "terminate", "time": "2026-12-01T02:00:00Z"}

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def _run(endpoint: str, tmp_path: Path, max_polls: int) -> tuple[int, Path, Path]:
    notice = tmp_path / "run" / "preempt.json"
    hook = tmp_path / "hook-ran"
    env = {
        "PATH": "/usr/bin:/bin",
        "IMDS_ENDPOINT": endpoint,
        "CLOUDGPU_NOTICE_FILE": str(notice),
        "CLOUDGPU_ON_NOTICE": f"touch {hook}",
        "CLOUDGPU_POLL_S": "0.05",
        "CLOUDGPU_MAX_POLLS": str(max_polls),
    }
    proc = subprocess.run(["sh", str(WATCHER)], env=env, timeout=60, capture_output=True)
    return proc.returncode, notice, hook


def test_notice_is_written_and_hook_run(tmp_path: Path) -> None:
    with imds_server(NOTICE, notice_after=2) as srv:
        rc, notice, hook = _run(url_of(srv), tmp_path, max_polls=50)
        assert srv.gets == 3  # two 404 polls, then the notice
    assert rc == 0
    assert json.loads(notice.read_text()) == {
        "action": "preempt",
        "time": NOTICE["time"],
        "aws_action": "terminate",
        "source": "aws-imds",
    }
    assert hook.exists()


def test_no_notice_no_file(tmp_path: Path) -> None:
    with imds_server(None) as srv:
        rc, notice, hook = _run(url_of(srv), tmp_path, max_polls=3)
        assert srv.gets == 3  # every poll carried a valid IMDSv2 token
    assert rc == 1 and not notice.exists() and not hook.exists()


def test_an_expired_token_is_renewed(tmp_path: Path) -> None:
    with imds_server(NOTICE, notice_after=3, expire_after=2) as srv:
        rc, notice, _ = _run(url_of(srv), tmp_path, max_polls=50)
        assert srv.tokens_issued == 2  # the first token, then one after the 401
    assert rc == 0 and json.loads(notice.read_text())["source"] == "aws-imds"
