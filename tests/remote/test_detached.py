"""Detached runs over real SSH (cloudgpu.remote.detached): followed again over a new
connection after the first one is cut, byte for byte; started once however often asked;
stopped as a whole process group."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from cloudgpu.remote import EXIT_STOPPED, ConnectionLost, SSHMachine, connect, detached
from tests.remote.conftest import instance_for
from tests.remote.sshd import SSHDServer

TICKS = 'for i in $(seq 1 20); do echo "out $i"; echo "err $i" >&2; sleep 0.05; done; exit 3'


def ssh(server: SSHDServer, tmp_path: Path) -> SSHMachine:
    m = connect(instance_for(server), known_hosts=tmp_path / "kh", use_openssh=False)
    assert isinstance(m, SSHMachine)
    return m


def test_a_run_is_followed_again_from_the_byte_it_had_reached(
    sshd_server: SSHDServer, tmp_path: Path
) -> None:
    first = ssh(sshd_server, tmp_path)
    run_dir = str(tmp_path / "run")
    detached.start(first, run_dir, TICKS, {})
    out: list[bytes] = []
    err: list[bytes] = []
    cut: list[int] = []

    def take(b: bytes) -> None:
        out.append(b)
        if b"out 5\n" in b"".join(out) and not cut:
            cut.append(len(out))
            first.transport.sock.shutdown(socket.SHUT_RDWR)  # a reset NAT, say

    follower = detached.Follower(run_dir, take, err.append)
    with pytest.raises(ConnectionLost):
        follower.follow(first, None)
    first.close()
    again = ssh(sshd_server, tmp_path)
    try:
        assert follower.follow(again, None) == 3
    finally:
        again.close()
    assert b"".join(out) == b"".join(b"out %d\n" % i for i in range(1, 21))
    assert b"".join(err) == b"".join(b"err %d\n" % i for i in range(1, 21))


def test_starting_twice_runs_the_command_once(sshd_server: SSHDServer, tmp_path: Path) -> None:
    m = ssh(sshd_server, tmp_path)
    try:
        run_dir, marks = str(tmp_path / "run"), tmp_path / "marks"
        for _ in range(2):
            detached.start(m, run_dir, f"echo ran >> {marks}", {})
        assert detached.Follower(run_dir, None, None).follow(m, None) == 0
    finally:
        m.close()
    assert marks.read_text() == "ran\n"


def test_stop_ends_the_whole_process_group(sshd_server: SSHDServer, tmp_path: Path) -> None:
    m = ssh(sshd_server, tmp_path)
    run_dir = tmp_path / "run"
    stop = threading.Event()
    try:
        detached.start(m, str(run_dir), "sleep 300 & sleep 300 & wait", {})
        threading.Timer(0.5, stop.set).start()
        t0 = time.monotonic()
        assert detached.Follower(str(run_dir), None, None).follow(m, stop) == EXIT_STOPPED
        assert time.monotonic() - t0 < detached.KILL_GRACE_S + 10
    finally:
        m.close()
    group = int((run_dir / "pgid").read_text())
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)  # nothing of the job is left


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="Linux's TCP_USER_TIMEOUT")
def test_a_peer_gone_without_a_reset_is_given_up_on_in_minutes(
    sshd_server: SSHDServer, tmp_path: Path
) -> None:
    """A VM that vanishes sends no RST: only unacknowledged data tells, and TCP alone
    retransmits for ~15 minutes before the run's connection is declared dead."""
    m = ssh(sshd_server, tmp_path)
    try:
        sock = m.transport.sock
        assert isinstance(sock, socket.socket)
        limit_ms = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
        assert 0 < limit_ms <= 120_000
    finally:
        m.close()
