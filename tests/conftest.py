"""Shared fixtures: an isolated CLOUDGPU_HOME per test, so no test sees another's files
or the user's real config."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.paths import Paths, default_paths


@pytest.fixture(autouse=True)
def cloudgpu_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cloudgpu-home"
    monkeypatch.setenv("CLOUDGPU_HOME", str(home))
    # A test never uses a real cloud account, whatever the developer's shell has set.
    for var in (
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_TENANT_ID",
        "AZURE_SUBSCRIPTION_ID",
        "RUNPOD_API_KEY",
        "LAMBDA_API_KEY",
        "VAST_API_KEY",
        "GITHUB_TOKEN",
        "CLOUDGPU_SIM",
    ):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def paths(cloudgpu_home: Path) -> Paths:
    return default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).ensure()
