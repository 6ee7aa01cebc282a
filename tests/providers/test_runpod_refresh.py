"""`cloudgpu catalog refresh --provider runpod` and `check --verify` against the loopback
GraphQL fake: the cache is replaced on success and left untouched on an auth failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.paths import Paths
from tests.fixtures.runpod.server import FakeRunPod
from tests.lifecycle.helpers import cli_proc, main_exit


@pytest.fixture
def fake() -> Iterator[FakeRunPod]:
    server = FakeRunPod().start()
    yield server
    server.stop()


@pytest.fixture
def configured(fake: FakeRunPod, paths: Paths, monkeypatch: pytest.MonkeyPatch) -> Paths:
    paths.config_file.write_text(
        f'[providers.runpod]\napi_base_url = "{fake.base_url}"\nbackoff_s = 0\n'
    )
    monkeypatch.setenv("RUNPOD_API_KEY", fake.api_key)
    return paths


def cache(paths: Paths) -> Path:
    return paths.catalog_cache / "runpod.json"


def test_refresh_replaces_the_snapshot(configured: Paths, fake: FakeRunPod) -> None:
    fake.fail_next = ["error_throttled"]  # one 429 first: retried, not reported
    code, out, err = main_exit(["catalog", "refresh", "--provider", "runpod"])
    assert code == 0, err
    assert "refreshed" in out and cache(configured).exists()
    code, out, _ = main_exit(["offers", "--provider", "runpod", "--gpu", "RTX4090", "--json"])
    rows = json.loads(out)
    assert rows and {r["instance_type"] for r in rows} >= {
        "1x_RTX4090_SECURE",
        "2x_RTX4090_COMMUNITY",
    }
    assert all(r["region"] == "global" and r["market"] == "on_demand" for r in rows)


def test_auth_failure_leaves_the_cache_alone(configured: Paths, fake: FakeRunPod) -> None:
    assert main_exit(["catalog", "refresh", "--provider", "runpod"])[0] == 0
    before = cache(configured).read_bytes()
    fake.api_key = "rpa_ROTATEDKEY00000000000000000000000"  # the configured key is now wrong
    code, out, err = main_exit(["catalog", "refresh", "--provider", "runpod"])
    assert code != 0
    assert "rejected the API key" in out + err and "cache left unchanged" in out + err
    assert "Traceback" not in err and "rpa_TESTKEY" not in out + err
    assert cache(configured).read_bytes() == before


def test_refresh_as_subprocess(configured: Paths, fake: FakeRunPod, cloudgpu_home: Path) -> None:
    res = cli_proc(
        ["catalog", "refresh", "--provider", "runpod"],
        cloudgpu_home,
        env={"RUNPOD_API_KEY": fake.api_key},
    )
    assert res.returncode == 0, res.stderr
    assert "refreshed" in res.stdout and fake.api_key not in res.stdout + res.stderr


def test_check_verify_names_the_source_not_the_key(configured: Paths, fake: FakeRunPod) -> None:
    _code, out, err = main_exit(["check", "--verify"])
    line = next(line for line in out.splitlines() if line.startswith("runpod"))
    assert "enabled" in line and "env:RUNPOD_API_KEY" in line
    assert fake.api_key not in out + err
    assert "myself" in [r["operation"] for r in fake.requests]
