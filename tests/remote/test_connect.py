"""Connecting: host key pinning (provider-reported and first-use), unreachable, auth."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cloudgpu.errors import HostKeyError, RemoteError
from cloudgpu.provider import Instance, InstanceState, SSHTarget
from cloudgpu.remote import connect
from cloudgpu.remote.hostkeys import host_label
from tests.remote.conftest import instance_for
from tests.remote.sshd import SSHDServer, free_port, start_sshd


def test_first_use_pins_and_reports_fingerprint(sshd_server: SSHDServer, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    seen: list[tuple[str, str]] = []
    connect(
        instance_for(sshd_server), known_hosts=kh, on_new_host_key=lambda h, f: seen.append((h, f))
    ).close()
    label = host_label(sshd_server.host, sshd_server.port)
    assert seen == [(label, sshd_server.host_key_fingerprint)]
    assert label in kh.read_text()
    connect(
        instance_for(sshd_server), known_hosts=kh, on_new_host_key=lambda h, f: seen.append((h, f))
    ).close()
    assert len(seen) == 1  # known now: no second announcement
    # The pinned file is OpenSSH's format: the ssh binary accepts the host strictly.
    subprocess.run(
        ["ssh", "-F", "/dev/null", "-p", str(sshd_server.port), "-i", str(sshd_server.key_path),
         "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={kh}",
         f"{sshd_server.user}@{sshd_server.host}", "true"],
        check=True, timeout=30,
    )  # fmt: skip


def test_changed_host_key_is_refused(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    server = start_sshd(tmp_path / "s")
    try:
        connect(instance_for(server), known_hosts=kh).close()
    finally:
        server.stop()
    # Same address, new host key: a reinstalled machine, or someone in the middle.
    server = start_sshd(tmp_path / "s", server.port, fresh_host_key=True)
    try:
        with pytest.raises(HostKeyError, match="CHANGED"):
            connect(instance_for(server), known_hosts=kh)
        assert kh.read_text().count(host_label(server.host, server.port)) == 1
    finally:
        server.stop()


def test_provider_fingerprint_must_match(sshd_server: SSHDServer, tmp_path: Path) -> None:
    good = instance_for(sshd_server, (sshd_server.host_key_fingerprint,))
    seen: list[str] = []
    connect(good, known_hosts=tmp_path / "kh", on_new_host_key=lambda h, f: seen.append(f)).close()
    assert seen == []  # pinned by the provider: nothing to trust on first use
    bad = instance_for(sshd_server, ("SHA256:" + "A" * 43,))
    with pytest.raises(HostKeyError, match="not the one the provider reported"):
        connect(bad, known_hosts=tmp_path / "kh2")


def test_unreachable_host(tmp_path: Path) -> None:
    inst = instance_for_port(free_port())
    with pytest.raises(RemoteError, match=r"cannot reach 127\.0\.0\.1") as err:
        connect(inst, known_hosts=tmp_path / "kh", timeout=1)
    assert "connection refused" in str(err.value)


def test_auth_failure(sshd_server: SSHDServer, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(RemoteError, match="authentication failed") as err:
        connect(instance_for(sshd_server), known_hosts=tmp_path / "kh", key_file=other)
    assert not isinstance(err.value, HostKeyError)


def test_missing_key_file(sshd_server: SSHDServer, tmp_path: Path) -> None:
    with pytest.raises(RemoteError, match="key file not found"):
        connect(instance_for(sshd_server), known_hosts=tmp_path / "kh", key_file=tmp_path / "nope")


def instance_for_port(port: int) -> Instance:
    return Instance(
        id="x", provider="t", state=InstanceState.RUNNING, ssh=SSHTarget("127.0.0.1", port)
    )


def test_provider_pin_replaces_a_stale_entry(sshd_server: SSHDServer, tmp_path: Path) -> None:
    # Clouds hand a released address to the next instance: the provider's fingerprint
    # for the new one is authoritative over what an older instance left in known_hosts.
    kh = tmp_path / "known_hosts"
    stale = start_sshd(tmp_path / "old")
    stale.stop()
    label = host_label(sshd_server.host, sshd_server.port)
    kh.write_text(f"{label} {(stale.dir / 'host_ed25519.pub').read_text()}")
    with pytest.raises(HostKeyError, match="CHANGED"):
        connect(instance_for(sshd_server), known_hosts=kh)
    connect(instance_for(sshd_server, (sshd_server.host_key_fingerprint,)), known_hosts=kh).close()
    connect(instance_for(sshd_server), known_hosts=kh).close()  # now pinned to the new key
