"""`cloudgpu catalog refresh` end to end as real subprocesses: the real RunPod plugin
against a loopback server answering with RunPod's GraphQL shapes (tests/fixtures/runpod),
then `offers` and `catalog info` reading the refreshed cache. A rejected key leaves the
cache as it was and never prints the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.runpod.server import FakeRunPod

pytestmark = pytest.mark.slow


@pytest.fixture
def fake() -> Iterator[FakeRunPod]:
    server = FakeRunPod().start()
    yield server
    server.stop()


def cloudgpu(home: Path, key: str, base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CLOUDGPU_HOME": str(home),
        "RUNPOD_API_KEY": key,
        "RUNPOD_API_BASE_URL": base_url,
    }
    return subprocess.run(
        [sys.executable, "-m", "cloudgpu", *args],
        capture_output=True, text=True, check=False, env=env, timeout=120,
    )  # fmt: skip


def test_refresh_then_offers_use_the_live_prices(tmp_path: Path, fake: FakeRunPod) -> None:
    done = cloudgpu(
        tmp_path, fake.api_key, fake.base_url, "catalog", "refresh", "--provider", "runpod"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "runpod   refreshed" in done.stdout
    cache = tmp_path / "cache" / "catalog" / "runpod.json"
    assert cache.is_file()
    info = json.loads(cloudgpu(tmp_path, "", "", "catalog", "info", "--json").stdout)
    runpod = next(r for r in info if r["provider"] == "runpod")
    assert runpod["origin"] == "cache" and runpod["offers"] > 0 and not runpod["stale"]
    offers = cloudgpu(tmp_path, "", "", "offers", "--provider", "runpod", "--limit", "0", "--json")
    rows = json.loads(offers.stdout)
    assert len(rows) == runpod["offers"]
    assert all(r["price_source"] != "snapshot:skypilot-catalog@0727c2b" for r in rows)


def test_rejected_key_leaves_the_cache_untouched(tmp_path: Path, fake: FakeRunPod) -> None:
    assert cloudgpu(tmp_path, fake.api_key, fake.base_url, "catalog", "refresh").returncode in (
        0,
        4,
    )
    cache = tmp_path / "cache" / "catalog" / "runpod.json"
    before = cache.read_bytes()
    wrong = "rpa_WRONGKEY1234567890ABCDEFGHIJ"
    done = cloudgpu(tmp_path, wrong, fake.base_url, "catalog", "refresh", "--provider", "runpod")
    assert done.returncode == 4
    assert "runpod   failed" in done.stdout and "cache left unchanged" in done.stdout
    assert "WRONGKEY" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert cache.read_bytes() == before
