"""`cloudgpu catalog refresh --provider lambda` and `check --verify` against the loopback
REST fake: the cache is replaced on success and left untouched on an auth failure."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudgpu.paths import Paths
from tests.lifecycle.helpers import cli_proc, main_exit

# `lambda` is a keyword, so the fixture folder can't appear in an import statement.
FakeLambda = importlib.import_module("tests.fixtures.lambda.server").FakeLambda


@pytest.fixture
def fake() -> Iterator[Any]:
    server = FakeLambda().start()
    yield server
    server.stop()


@pytest.fixture
def configured(fake: Any, paths: Paths, monkeypatch: pytest.MonkeyPatch) -> Paths:
    paths.config_file.write_text(
        f'[providers.lambda]\napi_url = "{fake.base_url}"\nbackoff_s = 0\n'
    )
    monkeypatch.setenv("LAMBDA_API_KEY", fake.api_key)
    return paths


def cache(paths: Paths) -> Path:
    return paths.catalog_cache / "lambda.json"


def test_refresh_replaces_the_snapshot(configured: Paths, fake: Any) -> None:
    fake.fail_next = ["error_throttled"]  # one 429 first: retried, not reported
    code, out, err = main_exit(["catalog", "refresh", "--provider", "lambda"])
    assert code == 0, err
    assert "refreshed" in out and cache(configured).exists()
    code, out, _ = main_exit(["offers", "--provider", "lambda", "--json"])
    rows = json.loads(out)
    assert {(r["instance_type"], r["region"]) for r in rows} >= {
        ("gpu_1x_a10", "us-east-1"),
        ("gpu_8x_a100_80gb_sxm4", "us-east-1"),
    }
    # The live list replaced the snapshot: only types with capacity now remain.
    assert not any(r["instance_type"] == "gpu_8x_v100" for r in rows)
    assert all(r["market"] == "on_demand" for r in rows)


def test_auth_failure_leaves_the_cache_alone(configured: Paths, fake: Any) -> None:
    assert main_exit(["catalog", "refresh", "--provider", "lambda"])[0] == 0
    before = cache(configured).read_bytes()
    old_key = fake.api_key
    fake.api_key = "secret_ROTATED_000000000000000000"  # the configured key is now wrong
    code, out, err = main_exit(["catalog", "refresh", "--provider", "lambda"])
    assert code != 0
    assert "rejected the API key" in out + err and "cache left unchanged" in out + err
    assert "Traceback" not in err and old_key not in out + err
    assert cache(configured).read_bytes() == before


def test_refresh_as_subprocess(configured: Paths, fake: Any, cloudgpu_home: Path) -> None:
    res = cli_proc(
        ["catalog", "refresh", "--provider", "lambda"],
        cloudgpu_home,
        env={"LAMBDA_API_KEY": fake.api_key},
    )
    assert res.returncode == 0, res.stderr
    assert "refreshed" in res.stdout and fake.api_key not in res.stdout + res.stderr


def test_check_verify_names_the_source_not_the_key(configured: Paths, fake: Any) -> None:
    _code, out, err = main_exit(["check", "--verify"])
    line = next(line for line in out.splitlines() if line.startswith("lambda"))
    assert "enabled" in line and "env:LAMBDA_API_KEY" in line
    assert fake.api_key not in out + err
    assert "GET /ssh-keys" in fake.calls()
