"""`cloudgpu catalog refresh --provider vast` and `check --verify` against the loopback
REST fake: the cache is replaced on success and left untouched on an auth failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.paths import Paths
from tests.fixtures.vast.server import FakeVast
from tests.lifecycle.helpers import cli_proc, main_exit


@pytest.fixture
def fake() -> Iterator[FakeVast]:
    server = FakeVast().start()
    yield server
    server.stop()


@pytest.fixture
def configured(fake: FakeVast, paths: Paths, monkeypatch: pytest.MonkeyPatch) -> Paths:
    paths.config_file.write_text(f'[providers.vast]\napi_url = "{fake.base_url}"\nbackoff_s = 0\n')
    monkeypatch.setenv("VAST_API_KEY", fake.api_key)
    return paths


def cache(paths: Paths) -> Path:
    return paths.catalog_cache / "vast.json"


def test_refresh_replaces_the_snapshot(configured: Paths, fake: FakeVast) -> None:
    fake.fail_next = ["error_throttled"]  # one 429 first: retried, not reported
    code, out, err = main_exit(["catalog", "refresh", "--provider", "vast"])
    assert code == 0, err
    assert "refreshed" in out and cache(configured).exists()
    code, out, _ = main_exit(["offers", "--provider", "vast", "--gpu", "RTX4090", "--json"])
    rows = json.loads(out)
    assert {(r["instance_type"], r["market"]) for r in rows} == {
        ("1x-RTX_4090-16-64305", "on_demand"),
        ("1x-RTX_4090-16-64305", "spot"),
    }
    assert all(r["region"] == "Quebec, CA" for r in rows)


def test_auth_failure_leaves_the_cache_alone(configured: Paths, fake: FakeVast) -> None:
    assert main_exit(["catalog", "refresh", "--provider", "vast"])[0] == 0
    before = cache(configured).read_bytes()
    old_key = fake.api_key
    fake.api_key = "ROTATEDKEY000000000000"  # the configured key is now wrong
    code, out, err = main_exit(["catalog", "refresh", "--provider", "vast"])
    assert code != 0
    assert "rejected the API key" in out + err and "cache left unchanged" in out + err
    assert "Traceback" not in err and old_key not in out + err
    assert cache(configured).read_bytes() == before


def test_refresh_as_subprocess(configured: Paths, fake: FakeVast, cloudgpu_home: Path) -> None:
    res = cli_proc(
        ["catalog", "refresh", "--provider", "vast"],
        cloudgpu_home,
        env={"VAST_API_KEY": fake.api_key},
    )
    assert res.returncode == 0, res.stderr
    assert "refreshed" in res.stdout and fake.api_key not in res.stdout + res.stderr


def test_check_verify_names_the_source_not_the_key(configured: Paths, fake: FakeVast) -> None:
    _code, out, err = main_exit(["check", "--verify"])
    line = next(line for line in out.splitlines() if line.startswith("vast"))
    assert "enabled" in line and "env:VAST_API_KEY" in line
    assert fake.api_key not in out + err
    assert "GET /users/current/" in fake.calls()


def test_place_names_drop_empty_parts_live_and_in_the_snapshot() -> None:
    from cloudgpu_providers.vast.offers import place_name

    from cloudgpu.catalog.catalog import load_catalog
    from cloudgpu.paths import default_paths

    assert place_name(", US, NA") == "US, NA"
    assert place_name("Czechia, CZ") == "Czechia, CZ"
    assert place_name(None) == place_name(" , ") == "unknown"
    paths = default_paths({"CLOUDGPU_HOME": "/nonexistent-cloudgpu-home"})
    regions = {o.region for o in load_catalog(paths, ["vast"], warn=None).offers}
    assert regions and not any(r.startswith(",") or ", ," in r for r in regions)
