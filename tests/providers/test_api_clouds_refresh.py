"""`cloudgpu catalog refresh --provider NAME` and `check --verify` on each API-key cloud
(Lambda, RunPod, Vast), written once, against the cloud's loopback fake: the cache is
replaced on success (after one retried 429) and left untouched on an auth failure, and
the key is never printed. What differs per cloud is in tests/providers/api_clouds.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudgpu.paths import Paths
from tests.lifecycle.helpers import cli_proc, main_exit
from tests.providers.api_clouds import CLOUDS, IDS, Cloud, offers_json


@pytest.fixture(params=CLOUDS, ids=IDS)
def cloud(request: pytest.FixtureRequest) -> Cloud:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def fake(cloud: Cloud) -> Iterator[Any]:
    server = cloud.fake().start()
    yield server
    server.stop()


@pytest.fixture
def configured(cloud: Cloud, fake: Any, paths: Paths, monkeypatch: pytest.MonkeyPatch) -> Paths:
    paths.config_file.write_text(
        f'[providers.{cloud.name}]\n{cloud.url_key} = "{fake.base_url}"\nbackoff_s = 0\n'
    )
    monkeypatch.setenv(cloud.key_env, fake.api_key)
    return paths


def cache(paths: Paths, cloud: Cloud) -> Path:
    return paths.catalog_cache / f"{cloud.name}.json"


def refresh(cloud: Cloud) -> tuple[int, str, str]:
    return main_exit(["catalog", "refresh", "--provider", cloud.name])


def test_refresh_replaces_the_snapshot(cloud: Cloud, configured: Paths, fake: Any) -> None:
    fake.fail_next = ["error_throttled"]  # one 429 first: retried, not reported
    code, out, err = refresh(cloud)
    assert code == 0, err
    assert "refreshed" in out and cache(configured, cloud).exists()
    code, out, _ = main_exit(["offers", "--provider", cloud.name, *cloud.refreshed_query, "--json"])
    assert code == 0
    cloud.refreshed(offers_json(out))


def test_auth_failure_leaves_the_cache_alone(cloud: Cloud, configured: Paths, fake: Any) -> None:
    assert refresh(cloud)[0] == 0
    before = cache(configured, cloud).read_bytes()
    old_key = fake.api_key
    fake.api_key = cloud.rotated_key  # the configured key is now wrong
    code, out, err = refresh(cloud)
    assert code != 0
    assert "rejected the API key" in out + err and "cache left unchanged" in out + err
    assert "Traceback" not in err and old_key not in out + err
    assert cache(configured, cloud).read_bytes() == before


def test_refresh_as_subprocess(
    cloud: Cloud, configured: Paths, fake: Any, cloudgpu_home: Path
) -> None:
    res = cli_proc(
        ["catalog", "refresh", "--provider", cloud.name],
        cloudgpu_home,
        env={cloud.key_env: fake.api_key},
    )
    assert res.returncode == 0, res.stderr
    assert "refreshed" in res.stdout and fake.api_key not in res.stdout + res.stderr


def test_check_verify_names_the_source_not_the_key(
    cloud: Cloud, configured: Paths, fake: Any
) -> None:
    _code, out, err = main_exit(["check", "--verify"])
    line = next(line for line in out.splitlines() if line.startswith(cloud.name))
    assert "enabled" in line and f"env:{cloud.key_env}" in line
    assert fake.api_key not in out + err
    assert cloud.verify_call(fake)
