"""Bulk byte streams through the system ``ssh`` binary (OpenSSH), for speed.

OpenSSH's C crypto moves bulk data faster than paramiko. It is used only after
cloudgpu.remote.transport verified and pinned the host key into our known_hosts file, and
it is told to check that same file strictly (never to add to it), so it can only ever
talk to the host paramiko already verified. One master connection is shared by all
streams (ControlMaster), so each transfer costs no new key exchange.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import cast

from cloudgpu.remote import syncwire
from cloudgpu.remote.hostkeys import host_label
from cloudgpu.remote.transport import Endpoint


class ProcStream:
    """transfer.Stream over one ``ssh HOST COMMAND`` child process."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.stdin, self.stderr = proc.stdin, proc.stderr
        self.stdout = cast(io.BufferedReader, proc.stdout)
        for f in (self.stdin, self.stdout):
            syncwire.big_pipe(f.fileno())

    def write(self, data: bytes) -> None:
        self.stdin.write(data)

    def read(self, n: int) -> bytes:
        return self.stdout.read1(n)

    def close_write(self) -> None:
        if not self.stdin.closed:
            try:
                self.stdin.close()
            except BrokenPipeError:
                pass

    def finish(self) -> tuple[int, str]:
        self.close_write()
        err = self.stderr.read()
        self.stdout.close()
        self.stderr.close()
        status = self.proc.wait()
        return (status, err.decode(errors="replace"))


class OpenSSH:
    """Builds ``ssh`` command lines for one verified endpoint and runs streams on it."""

    def __init__(self, endpoint: Endpoint, known_hosts: Path, binary: str = "ssh") -> None:
        self.endpoint = endpoint
        self.known_hosts = known_hosts
        self.binary = binary
        self._dir: str | None = None
        self._release: weakref.finalize | None = None

    @property
    def control(self) -> str:
        """The master's socket, in a private directory made on first use; it is removed
        (and the master told to exit) on close(), or when we are collected or exit."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="cgpu-ssh-")  # short: socket paths are limited
            exit_argv = [*self.argv()[:-1], "-O", "exit", self.endpoint.host]
            self._release = weakref.finalize(self, _release, exit_argv, self._dir)
        return f"{self._dir}/cm"

    @staticmethod
    def available() -> str | None:
        return shutil.which("ssh")

    def argv(self, command: str | None = None) -> list[str]:
        ep = self.endpoint
        args = [
            self.binary,
            "-p", str(ep.port),
            "-l", ep.user,
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"HostKeyAlias={host_label(ep.host, ep.port)}",
            # The first stream becomes the shared master (backgrounded with its stdio on
            # /dev/null, so our pipes still see EOF); later ones reuse its connection.
            "-o", "ControlMaster=auto",
            "-o", "ControlPersist=300",
            "-o", f"ControlPath={self.control}",
            "-o", "LogLevel=ERROR",
            "-o", "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr",
            "-F", "/dev/null",
        ]  # fmt: skip
        if ep.key_file:
            args += ["-i", str(ep.key_file), "-o", "IdentitiesOnly=yes"]
        args.append(ep.host)
        if command is not None:
            args.append(command)
        return args

    def stream(self, command: str) -> ProcStream:
        proc = subprocess.Popen(
            self.argv(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=1 << 20,
        )
        return ProcStream(proc)

    def close(self) -> None:
        if self._release is not None:
            self._release()


def _release(exit_argv: list[str], directory: str) -> None:
    if Path(directory, "cm").exists():
        subprocess.run(
            exit_argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    shutil.rmtree(directory, ignore_errors=True)
