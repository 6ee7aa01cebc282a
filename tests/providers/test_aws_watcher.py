"""The instance-side AWS spot watcher (templates/watchers/aws.sh) against a loopback
IMDSv2: token first, then spot/instance-action, whose 200 body is the notice
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html),
and events/recommendations/rebalance, an advisory that does not end the watch."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import cloudgpu.templates
import pytest

from tests.providers.aws_fixtures.servers import imds_server, url_of

WATCHER = Path(cloudgpu.templates.__file__).parent / "watchers" / "aws.sh"
NOTICE = {"action": "terminate", "time": "2026-12-01T02:00:00Z"}

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def _run(endpoint: str, tmp_path: Path, max_polls: int, **extra: str) -> tuple[int, Path, Path]:
    notice = tmp_path / "run" / "preempt.json"
    advisory = tmp_path / "run" / "advisory.json"
    env = {
        "PATH": "/usr/bin:/bin",
        "IMDS_ENDPOINT": endpoint,
        "CLOUDGPU_NOTICE_FILE": str(notice),
        "CLOUDGPU_ADVISORY_FILE": str(advisory),
        "CLOUDGPU_POLL_S": "0.05",
        "CLOUDGPU_MAX_POLLS": str(max_polls),
        **extra,
    }
    proc = subprocess.run(["sh", str(WATCHER)], env=env, timeout=60, capture_output=True)
    return proc.returncode, notice, advisory


def test_notice_is_written_when_it_appears(tmp_path: Path) -> None:
    with imds_server(NOTICE, notice_after=3) as srv:
        rc, notice, advisory = _run(url_of(srv), tmp_path, max_polls=50)
        assert srv.gets == 5  # two rounds of (action 404, rebalance 404), then the notice
    assert rc == 0
    assert json.loads(notice.read_text()) == {
        "action": "preempt",
        "time": NOTICE["time"],
        "detail": "terminate",
        "source": "aws-imds",
    }
    assert not advisory.exists()


def test_no_notice_no_file(tmp_path: Path) -> None:
    with imds_server(None) as srv:
        rc, notice, advisory = _run(url_of(srv), tmp_path, max_polls=3)
        assert srv.gets == 6  # both paths each poll, every one with a valid IMDSv2 token
    assert rc == 1 and not notice.exists() and not advisory.exists()


def test_a_rebalance_recommendation_is_an_advisory_and_the_watch_goes_on(tmp_path: Path) -> None:
    rebalance = {"noticeTime": "2026-12-01T01:58:00Z"}
    with imds_server(NOTICE, notice_after=6, rebalance=rebalance) as srv:
        rc, notice, advisory = _run(url_of(srv), tmp_path, max_polls=50)
    assert json.loads(advisory.read_text()) == {
        "action": "rebalance recommendation",
        "time": "2026-12-01T01:58:00Z",
        "source": "aws-imds",
    }
    assert rc == 0 and json.loads(notice.read_text())["detail"] == "terminate"


def test_it_stops_at_the_deadline(tmp_path: Path) -> None:
    with imds_server(None) as srv:
        rc, notice, _ = _run(url_of(srv), tmp_path, 0, CLOUDGPU_DEADLINE=str(int(time.time()) - 1))
    assert rc == 1 and not notice.exists()


def test_an_expired_token_is_renewed(tmp_path: Path) -> None:
    with imds_server(NOTICE, notice_after=3, expire_after=2) as srv:
        rc, notice, _ = _run(url_of(srv), tmp_path, max_polls=50)
        assert srv.tokens_issued == 2  # the first token, then one after the 401
    assert rc == 0 and json.loads(notice.read_text())["source"] == "aws-imds"
