"""`cloudgpu check` and `cloudgpu catalog refresh` with the Azure plugin, through click's
runner and as a real subprocess: credentials from an Azure CLI login, ARM and the Retail
Prices API on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudgpu.cli import cli
from cloudgpu.paths import default_paths
from tests.fixtures.azure.fake_arm import FakeArm
from tests.fixtures.azure.fake_retail import FakeRetail
from tests.fixtures.azure.support import TOKEN, az_login


@pytest.fixture
def setup(
    tmp_path: Path, cloudgpu_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FakeArm, FakeRetail, dict[str, str]]]:
    with FakeArm(tmp_path) as arm, FakeRetail() as retail:
        paths = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).ensure()
        paths.config_file.write_text(
            f'[providers.azure]\narm_endpoint = "{arm.base_url}"\n'
            f'ca_bundle = "{arm.ca_bundle}"\nretail_prices_url = "{retail.url}"\n'
        )
        env = az_login(tmp_path, arm.subscription)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        yield arm, retail, env


def azure_row(output: str) -> dict[str, object]:
    rows = json.loads(output)
    return next(r for r in rows if r["provider"] == "azure")


def test_check_without_credentials_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "none"))
    res = CliRunner().invoke(cli, ["check", "--json"])
    assert res.exit_code == 0, res.output
    row = azure_row(res.output)
    assert row["enabled"] is False and "no Azure credentials" in str(row["reason"])


def test_check_verify_uses_the_cli_login(setup: tuple[FakeArm, FakeRetail, dict[str, str]]) -> None:
    arm, _, _ = setup
    res = CliRunner().invoke(cli, ["check", "--verify", "--json"])
    assert res.exit_code == 0, res.output
    row = azure_row(res.output)
    assert row["enabled"] is True, row
    assert "azure-cli:" in str(row["reason"]) and "resource_groups.list" in str(row["reason"])
    assert TOKEN not in res.output
    assert [m for m, p, _ in arm.state.requests] == ["GET"]


def test_catalog_refresh_azure_as_subprocess(
    setup: tuple[FakeArm, FakeRetail, dict[str, str]], cloudgpu_home: Path
) -> None:
    arm, retail, env = setup
    res = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "catalog", "refresh", "--provider", "azure"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**env, "CLOUDGPU_HOME": str(cloudgpu_home), "HOME": str(cloudgpu_home)},
    )
    assert res.returncode == 0, res.stderr
    assert "refreshed" in res.stdout and "4 offers" in res.stdout
    assert len(retail.server.queries) == 2  # both pages
    assert any(p.lower().endswith("/skus") for _, p, _ in arm.state.requests)
    assert TOKEN not in res.stdout + res.stderr


def test_expired_cli_login_is_an_auth_problem_not_a_crash(
    setup: tuple[FakeArm, FakeRetail, dict[str, str]], tmp_path: Path
) -> None:
    arm, _, env = setup
    az = Path(env["PATH"].split(":")[0]) / "az"
    # What the real CLI prints when its refresh token has expired.
    az.write_text(
        '#!/bin/sh\necho "ERROR: AADSTS700082: The refresh token has expired due to '
        "inactivity. Please run 'az login' to setup account.\" >&2\nexit 1\n"
    )
    res = CliRunner().invoke(cli, ["check", "--verify", "--json"])
    assert res.exit_code == 0, res.output
    row = azure_row(res.output)
    assert row["enabled"] is False and "token" in str(row["reason"]).lower()
    assert arm.state.requests == []
