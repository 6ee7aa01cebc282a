"""Fixtures shared by the provider tests: a real loopback sshd standing in for a rented
machine, and that machine's scratch dir (whose deadline watchdog is stopped afterwards).
A test module that needs a different sshd defines its own fixture of the same name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.providers.lifecycle_kit import reaped
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
