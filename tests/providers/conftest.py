"""Fixtures shared by the provider tests: a real loopback sshd standing in for a rented
machine, that machine's scratch dir (whose deadline watchdog is stopped afterwards), and
the setup of a launch against an API-key provider's fake.
A test module that needs a different sshd defines its own fixture of the same name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lifecycle.helpers import job_file
from tests.providers.lifecycle_kit import api_provider_config, reaped, write_config
from tests.remote.sshd import SSHDServer, start_sshd


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SSHDServer]:
    server = start_sshd(tmp_path / "sshd")
    yield server
    server.stop()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """The machine's scratch dir (NVMe mount). The bootstrap arms a deadline watchdog
    there (setsid, to outlive SSH); a real machine is thrown away with it, this one is
    not, so it is stopped when the test ends."""
    with reaped(tmp_path / "scratch") as path:
        yield path


ApiLaunch = Callable[..., Path]


@pytest.fixture
def api_launch(
    sshd: SSHDServer,
    scratch: Path,
    cloudgpu_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> ApiLaunch:
    """Set up `cloudgpu launch` against an API-key provider's loopback fake whose machines
    are ``sshd``: config.toml, the API key in the environment, and the job file. Called as
    ``api_launch(fake, section, url_key, key_env, job, extra="")``; returns the job path."""

    def setup(
        fake: Any, section: str, url_key: str, key_env: str, job: str, extra: str = ""
    ) -> Path:
        write_config(
            cloudgpu_home,
            api_provider_config(section, url_key, fake.base_url, sshd, scratch, extra),
        )
        monkeypatch.setenv(key_env, fake.api_key)
        return job_file(tmp_path, job)

    return setup
