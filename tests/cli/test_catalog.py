"""`cloudgpu catalog info` and `catalog refresh` with fake plugins standing for each
outcome: refreshed, auth failure, throttled, disabled, no live source, broken import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloudgpu.catalog.catalog import cache_path, load_catalog, write_cache
from cloudgpu.cli import cli
from cloudgpu.errors import CatalogError, ConfigError, ProviderError

from .fakes import _offer, fake_app


def invoke(home: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj=fake_app(home))


def test_refresh_writes_the_cache_and_offers_use_it(cloudgpu_home: Path) -> None:
    res = invoke(cloudgpu_home, "catalog", "refresh", "--provider", "goodcloud")
    assert res.exit_code == 0, res.output
    assert "goodcloud refreshed 2 offers" in res.stdout
    app = fake_app(cloudgpu_home)
    cat = load_catalog(app.paths, ["goodcloud"])
    assert sorted(o.price_per_hour for o in cat.offers) == [16.0, 24.0]
    assert cat.sources["goodcloud"].from_cache
    assert "goodcloud:price-api" in cat.sources["goodcloud"].source
    rows = json.loads(invoke(cloudgpu_home, "offers", "--provider", "goodcloud", "--json").stdout)
    assert [r["price_per_hour"] for r in rows] == [16.0, 24.0] and not rows[0]["stale"]


def test_auth_failure_leaves_the_cache_untouched_and_hides_the_secret(cloudgpu_home: Path) -> None:
    app = fake_app(cloudgpu_home)
    write_cache(app.paths, "lockedcloud", [_offer("lockedcloud", 9.0)], "earlier refresh")
    before = cache_path(app.paths, "lockedcloud").read_bytes()
    res = invoke(cloudgpu_home, "catalog", "refresh", "--provider", "lockedcloud")
    assert res.exit_code != 0 and isinstance(res.exception, ProviderError)
    assert "lockedcloud failed" in res.stdout and "cache left unchanged" in res.stdout
    assert "hint: check LOCKED_TOKEN" in res.stdout
    assert "sk-THIS-IS-SECRET" not in res.output
    assert cache_path(app.paths, "lockedcloud").read_bytes() == before


def test_refresh_reports_each_provider_on_its_own_line(cloudgpu_home: Path) -> None:
    res = invoke(cloudgpu_home, "catalog", "refresh")
    lines = {line.split()[0]: line for line in res.stdout.splitlines()}
    assert "refreshed" in lines["goodcloud"]
    assert "failed" in lines["busycloud"] and "503" in lines["busycloud"]
    assert "skipped" in lines["offcloud"] and "no OFF_TOKEN" in lines["offcloud"]
    assert "skipped" in lines["staticcloud"] and "no live price source" in lines["staticcloud"]
    assert "failed" in lines["brokencloud"] and "brokensdk" in lines["brokencloud"]
    assert isinstance(res.exception, ProviderError) and res.exception.exit_code == 4
    assert "brokencloud" in str(res.exception) and "goodcloud" not in str(res.exception)
    assert "offcloud: refreshing" not in res.stderr and "goodcloud: refreshing" in res.stderr
    assert "refreshed 1 of 7 provider(s); skipped 3" in res.stderr


def test_refresh_of_an_unknown_provider_is_reported(cloudgpu_home: Path) -> None:
    res = invoke(cloudgpu_home, "catalog", "refresh", "--provider", "goodclod")
    assert "goodclod unknown   unknown provider 'goodclod'; did you mean goodcloud?" in res.stdout
    assert isinstance(res.exception, ConfigError) and res.exception.exit_code == 2


def test_info_table_and_json(cloudgpu_home: Path) -> None:
    invoke(cloudgpu_home, "catalog", "refresh", "--provider", "goodcloud")
    res = invoke(cloudgpu_home, "catalog", "info")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["PROVIDER", "OFFERS", "ORIGIN"]
    good = next(line for line in lines if line.startswith("goodcloud"))
    assert " cache " in good
    aws = next(line for line in lines if line.startswith("aws"))
    assert "snapshot" in aws and "skypilot-org/skypilot-catalog" in aws
    rows = {
        r["provider"]: r
        for r in json.loads(invoke(cloudgpu_home, "catalog", "info", "--json").stdout)
    }
    assert rows["goodcloud"]["origin"] == "cache" and rows["goodcloud"]["offers"] == 2
    assert rows["aws"]["origin"] == "snapshot" and rows["aws"]["offers"] > 1000
    assert rows["gcp"]["skipped"]["accelerator row T4 skipped: N1 host price not in table"] > 0


def test_info_marks_stale_sources(cloudgpu_home: Path) -> None:
    rows = json.loads(
        invoke(cloudgpu_home, "catalog", "info", "--json", "--stale-days", "0.0001").stdout
    )
    assert all(r["stale"] for r in rows)
    assert "STALE" in invoke(cloudgpu_home, "catalog", "info", "--stale-days", "0.0001").stdout


@pytest.mark.slow
def test_refresh_subprocess_without_credentials(tmp_path: Path) -> None:
    """The real AWS plugin, no credentials: skipped with the reason, nothing cached."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    none = str(tmp_path / "none")
    env.update(
        CLOUDGPU_HOME=str(tmp_path),
        AWS_CONFIG_FILE=none,
        AWS_SHARED_CREDENTIALS_FILE=none,
        AWS_EC2_METADATA_DISABLED="true",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "catalog", "refresh", "--provider", "aws"],
        capture_output=True, text=True, check=False, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr  # asked for, but cannot be: bad input
    assert "aws      skipped   not enabled" in proc.stdout
    assert "aws: refreshing" not in proc.stderr  # nothing was fetched
    assert "error: cannot refresh: aws" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "cache" / "catalog" / "aws.json").exists()


def test_offers_names_a_plugin_without_catalog_table(cloudgpu_home: Path) -> None:
    rows = json.loads(invoke(cloudgpu_home, "offers", "--provider", "ownboxes", "--json").stdout)
    assert [(r["provider"], r["price_per_hour"]) for r in rows] == [("ownboxes", 3.0)]
    res = invoke(cloudgpu_home, "offers", "--provider", "goodcloud")
    assert isinstance(res.exception, CatalogError) and res.exception.exit_code == 2
    assert "run `cloudgpu catalog refresh --provider goodcloud`" in (res.exception.hint or "")
    res = invoke(cloudgpu_home, "offers", "--provider", "offcloud")
    assert isinstance(res.exception, ConfigError) and res.exception.exit_code == 2
    assert "not enabled: no OFF_TOKEN set" in str(res.exception)


def test_offers_provider_local_and_sim_as_a_subprocess(cloudgpu_home: Path) -> None:
    env = {**os.environ, "CLOUDGPU_HOME": str(cloudgpu_home), "CLOUDGPU_SIM": "1"}
    for name in ("local", "sim"):
        proc = subprocess.run(
            [sys.executable, "-m", "cloudgpu", "offers", "--provider", name, "--json"],
            capture_output=True, text=True, env=env, check=False, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert {r["provider"] for r in json.loads(proc.stdout)} == {name}


def test_refresh_sweep_with_only_skipped_providers_succeeds(cloudgpu_home: Path) -> None:
    res = invoke(cloudgpu_home, "catalog", "refresh", "--provider", "goodcloud", "--json")
    assert res.exit_code == 0
    (row,) = json.loads(res.stdout)
    assert row["status"] == "refreshed"
    res = invoke(cloudgpu_home, "catalog", "refresh", "--provider", "offcloud,staticcloud")
    assert isinstance(res.exception, ConfigError) and res.exception.exit_code == 2
