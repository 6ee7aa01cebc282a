"""`cloudgpu check`: each installed provider, enabled or not and why, never a secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloudgpu.cli import cli

from .fakes import fake_app


def invoke(home: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj=fake_app(home), catch_exceptions=False)


def test_each_provider_on_its_line_with_sources(cloudgpu_home: Path) -> None:
    res = invoke(cloudgpu_home, "check")
    assert res.exit_code == 0
    out = res.stdout
    assert "goodcloud    enabled   token from env:FAKE_TOKEN" in out
    assert "offcloud     disabled  no OFF_TOKEN set" in out
    assert "looked at: env:OFF_TOKEN, file:~/.off" in out
    assert "brokencloud  disabled  cannot load plugin: ModuleNotFoundError" in out
    assert "5 of 7 providers enabled" in res.stderr


def test_verify_calls_check_and_reports_failures(cloudgpu_home: Path) -> None:
    rows = {
        r["provider"]: r
        for r in json.loads(invoke(cloudgpu_home, "check", "--verify", "--json").stdout)
    }
    assert rows["lockedcloud"]["enabled"] is False
    assert "key rejected by GET /me" in rows["lockedcloud"]["reason"]
    assert rows["goodcloud"]["enabled"] is True and rows["goodcloud"]["live_prices"] is True
    assert rows["staticcloud"]["live_prices"] is False
    assert rows["goodcloud"]["capabilities"]["spot"] is True
    assert rows["brokencloud"]["error"]


@pytest.mark.slow
def test_check_subprocess_real_plugins_print_no_secret(tmp_path: Path) -> None:
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
    env = {
        **os.environ,
        "CLOUDGPU_HOME": str(tmp_path),
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": secret,
        "RUNPOD_API_KEY": "rpa_" + "X" * 40,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "check", "--json"],
        capture_output=True, text=True, check=False, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {r["provider"]: r for r in json.loads(proc.stdout)}
    assert {"aws", "gcp", "azure", "runpod", "local"} <= set(rows)
    assert rows["aws"]["enabled"] is True
    for text in (proc.stdout, proc.stderr):
        assert secret not in text and "X" * 40 not in text and "AKIAIOSFODNN7EXAMPLE" not in text
