"""A real OpenSSH server on a free loopback port, for tests (and benchmarks) to talk to.

Import the ``sshd_server`` fixture (``from tests.remote.sshd import sshd_server``) or call
:func:`start_sshd` directly. Each server has its own config, host key and client key in
its own directory; it listens on 127.0.0.1 only and is stopped when the fixture ends.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class SSHDServer:
    host: str
    port: int
    user: str
    key_path: Path  # client private key authorized on the server
    host_key_fingerprint: str  # "SHA256:..." as ssh-keygen -l prints it
    host_key_path: Path
    dir: Path
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path, kind: str = "ed25519") -> str:
    """Create a key pair at ``path`` (+ .pub); return its SHA256 fingerprint."""
    if not path.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "cloudgpu-test", "-f", str(path)],
            check=True,
        )
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)], check=True, capture_output=True
    ).stdout.decode()
    return out.split()[1]


def write_config(d: Path, port: int, user: str, setenv: Mapping[str, str] | None = None) -> Path:
    cfg = d / "sshd_config"
    # Sessions get their own HOME: the host user's dotfiles (pyenv init and its rehash
    # lock) are not run by every test command.
    (d / "home").mkdir(exist_ok=True)
    cfg.write_text(
        f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d / "host_ed25519"}
PidFile {d / "sshd.pid"}
AuthorizedKeysFile {d / "authorized_keys"}
AllowUsers {user}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
StrictModes no
MaxStartups 100:30:200
MaxSessions 100
Subsystem sftp internal-sftp
SetEnv {" ".join(f"{k}={v}" for k, v in {"HOME": str(d / "home"), **(setenv or {})}.items())}
LogLevel ERROR
"""
    )
    return cfg


def start_sshd(
    d: Path,
    port: int | None = None,
    *,
    fresh_host_key: bool = False,
    setenv: Mapping[str, str] | None = None,
) -> SSHDServer:
    """Start sshd with its files in ``d``; reuses the keys already there unless told.
    ``setenv``: more variables every session gets (sshd honours one SetEnv line only)."""
    if not os.path.exists(SSHD):
        raise RuntimeError("OpenSSH's sshd is not installed: run `make sysdeps`")
    d.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation dir (root only)
    if fresh_host_key:
        for p in (d / "host_ed25519", d / "host_ed25519.pub"):
            p.unlink(missing_ok=True)
    host_fp = keygen(d / "host_ed25519")
    keygen(d / "client_ed25519")
    shutil.copyfile(d / "client_ed25519.pub", d / "authorized_keys")
    user = getpass.getuser()
    port = port or free_port()
    cfg = write_config(d, port, user, setenv)
    log = open(d / "sshd.log", "ab")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(cfg)], stderr=log, stdin=subprocess.DEVNULL
    )
    log.close()
    server = SSHDServer(
        "127.0.0.1", port, user, d / "client_ed25519", host_fp, d / "host_ed25519", d, proc
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(d / 'sshd.log').read_text()[-500:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.02)
    server.stop()
    raise RuntimeError("sshd did not start listening within 10 s")


@pytest.fixture
def sshd_server(tmp_path: Path) -> Iterator[SSHDServer]:
    """A running test sshd: ``.host``, ``.port``, ``.user``, ``.key_path``,
    ``.host_key_fingerprint``."""
    server = start_sshd(tmp_path / "sshd")
    try:
        yield server
    finally:
        server.stop()
