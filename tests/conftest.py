"""Shared fixtures: an isolated CLOUDGPU_HOME per test, so no test sees another's files
or the user's real config."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
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


@pytest.fixture(scope="session", autouse=True)
def _no_watchdog_outlives_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Where a loopback sshd on this host stands in for a cloud VM (the AWS, GCP, Azure
    and API-cloud lifecycle tests), the bootstrap's deadline watchdog is a process here
    that terminating the fake VM cannot end (a real VM takes it down with itself). The
    run ends every cloudgpu-tagged process whose environment points into its own
    temporary folder (its sshd's HOME, its NVMe path)."""
    yield
    base = f"={tmp_path_factory.getbasetemp()}/".encode()
    tags = (b"CLOUDGPU_DEADLINE_OF=", b"CLOUDGPU_INSTANCE=")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours
            continue
        tagged = any(v.startswith(tags) for v in env)
        if tagged and any(base in v for v in env):
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)
