"""Fixtures for the remote-layer tests: a real sshd and machines connected to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.provider import Instance, InstanceState, SSHTarget
from cloudgpu.remote import SSHMachine, connect
from tests.remote.sshd import SSHDServer, sshd_server

__all__ = ["sshd_server"]


def instance_for(server: SSHDServer, fingerprints: tuple[str, ...] = ()) -> Instance:
    target = SSHTarget(
        server.host, server.port, server.user, fingerprints, key_file=str(server.key_path)
    )
    return Instance(id="test", provider="test", state=InstanceState.RUNNING, ssh=target)


@pytest.fixture(params=["paramiko", "openssh"])
def machine(
    request: pytest.FixtureRequest, sshd_server: SSHDServer, tmp_path: Path
) -> Iterator[SSHMachine]:
    """An SSHMachine on the test sshd; bulk bytes over paramiko or the ssh binary."""
    m = connect(
        instance_for(sshd_server, (sshd_server.host_key_fingerprint,)),
        known_hosts=tmp_path / "known_hosts",
        use_openssh=request.param == "openssh",
    )
    assert isinstance(m, SSHMachine)
    try:
        yield m
    finally:
        m.close()
