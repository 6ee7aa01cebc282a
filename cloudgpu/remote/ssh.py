"""SSHMachine: a Machine reached over one authenticated paramiko Transport.

Commands run as ``bash -c`` (``sh`` if bash is missing) in the login session, whose
process group the wrapper reports first, so ``stop`` can kill the whole tree of the
job, not just the shell. Bulk transfers may go through the system ``ssh`` binary when one
is given (:class:`cloudgpu.remote.openssh.OpenSSH`): it moves bytes faster than paramiko.
This module does not verify host keys itself; cloudgpu.remote.transport did that.
"""

from __future__ import annotations

import re
import select
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import paramiko

from cloudgpu.errors import ConfigError, RemoteError
from cloudgpu.remote import transfer
from cloudgpu.remote.groupkill import KILL_GRACE_S, kill_group
from cloudgpu.remote.machine import (
    EXIT_STOPPED,
    EXIT_TIMEOUT,
    NVME_ENV,
    ConnectionLost,
    ExcludeFn,
    OutputFn,
    ProgressFn,
    TransferStats,
)
from cloudgpu.remote.openssh import OpenSSH
from cloudgpu.remote.transport import WINDOW, Endpoint, close_transport

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MARK = b"CGPU-PGID "


def compose(
    command: str, env: Mapping[str, str], cwd: str | None, launcher: Sequence[str] = ()
) -> str:
    """The remote shell text: report our process group, set env and cwd, run.

    With a ``launcher`` the process group reported is the launcher's on the SSH host (so
    stop kills it, and it its remote side); env and cwd apply where the command runs.
    """
    lines = []
    for k, v in env.items():
        if not _ENV_NAME.match(k):
            raise ConfigError(f"env: {k!r} is not a valid environment variable name")
        lines.append(f"export {k}={shlex.quote(v)}")
    if cwd:
        lines.append(f"cd {shlex.quote(cwd)} || exit 1")
    q = shlex.quote(command)
    lines.append(f"command -v bash >/dev/null 2>&1 && exec bash -c {q}; exec sh -c {q}")
    body = "\n".join(lines)
    mark = f"printf '{_MARK.decode()}%s\\n' $$"
    if launcher:
        return f"{mark}\nexec {launched(launcher, body)}"
    return f"{mark}\n{body}"


def launched(launcher: Sequence[str], command: str) -> str:
    """``command`` (shell text) run through ``launcher`` (argv) on the SSH host."""
    if not launcher:
        return command
    return f"{shlex.join(launcher)} sh -c {shlex.quote(command)}"


_LOST = (paramiko.SSHException, OSError, EOFError)


class ParamikoStream:
    """transfer.Stream over one exec channel; a lost connection is a RemoteError."""

    def __init__(self, chan: paramiko.Channel, label: str = "instance") -> None:
        self.chan = chan
        self.label = label

    def _lost(self, exc: BaseException) -> RemoteError:
        return ConnectionLost(f"{self.label}: SSH connection lost during a transfer ({exc!r})")

    def write(self, data: bytes) -> None:
        try:
            self.chan.sendall(data)
        except _LOST as exc:
            raise self._lost(exc) from exc

    def read(self, n: int) -> bytes:
        try:
            return self.chan.recv(n)
        except _LOST as exc:
            raise self._lost(exc) from exc

    def close_write(self) -> None:
        try:
            self.chan.shutdown_write()
        except _LOST as exc:
            raise self._lost(exc) from exc

    def finish(self) -> tuple[int, str]:
        try:
            status = self.chan.recv_exit_status()
            err = b""
            while self.chan.recv_stderr_ready():
                err += self.chan.recv_stderr(65536)
        except _LOST as exc:
            raise self._lost(exc) from exc
        finally:
            self.chan.close()
        return status, err.decode(errors="replace")


class SSHMachine:
    """A remote instance; see cloudgpu.remote.machine.Machine for the contract."""

    def __init__(
        self,
        transport: paramiko.Transport,
        endpoint: Endpoint,
        *,
        nvme_path: str = "/nvme",
        python: str = "python3",
        openssh: OpenSSH | None = None,
        launcher: Sequence[str] = (),
    ) -> None:
        self.transport = transport
        self.launcher = tuple(launcher)  # see SSHTarget.launcher
        # A job may run detached (cloudgpu.remote.detached) and be followed again after a
        # dropped connection; not through a launcher, whose step ends with the command.
        self.detachable = not self.launcher
        self.endpoint = endpoint
        self.nvme_path = nvme_path
        self.python = python  # the interpreter the sync agent runs with on the instance
        self.openssh = openssh

    # -- exec ------------------------------------------------------------------------

    def _channel(self, command: str) -> paramiko.Channel:
        try:
            chan = self.transport.open_session(window_size=WINDOW)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"{self.endpoint.label}: SSH session lost ({exc})") from exc
        return chan

    def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_stdout: OutputFn | None = None,
        on_stderr: OutputFn | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> int:
        full_env = {NVME_ENV: self.nvme_path, **(env or {})}
        chan = self._channel(compose(command, full_env, cwd, self.launcher))
        chan.shutdown_write()  # jobs get EOF on stdin, never a hang waiting for input
        out = Demux(on_stdout)
        ending = Ending(stop, timeout, self._kill)
        try:
            while not _finished(chan):
                if (gave_up := ending.poll(out)) is not None:
                    return gave_up
                select.select([chan], [], [], 0.1)
                _drain(chan, out.feed, on_stderr)
                lost = chan.closed or not self.transport.is_active()
                if lost and not chan.exit_status_ready():
                    raise ConnectionLost(f"{self.endpoint.label}: connection lost while running")
            status = chan.recv_exit_status()
        finally:
            chan.close()
        if ending.ended is not None:
            return ending.ended
        if status < 0 and not self.transport.is_active():  # no status: the connection died
            raise ConnectionLost(f"{self.endpoint.label}: connection lost while running")
        return 255 if status < 0 else status  # < 0: killed by a signal we did not send

    def _kill(self, pgid: int | None) -> None:
        if pgid is None:
            return
        chan = self._channel(kill_group(str(pgid)))
        chan.recv_exit_status()
        chan.close()

    # -- transfer --------------------------------------------------------------------

    def _paramiko_stream(self, command: str) -> transfer.Stream:
        return ParamikoStream(self._channel(launched(self.launcher, command)), self.endpoint.label)

    def _openssh_stream(self, command: str) -> transfer.Stream:
        assert self.openssh is not None
        return self.openssh.stream(launched(self.launcher, command))

    def _transfer(self, op: Callable[[transfer.OpenStream], TransferStats]) -> TransferStats:
        """Run ``op`` over the ssh binary when we have one, else (or if the binary cannot
        connect, e.g. its key lives in an agent it cannot reach) over paramiko."""
        if self.openssh is not None:
            try:
                return op(self._openssh_stream)
            except transfer.TransportFailed:
                self.openssh.close()
                self.openssh = None  # a sync is incremental: retrying resends only the rest
        return op(self._paramiko_stream)

    def put_dir(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressFn | None = None,
        exclude: ExcludeFn | None = None,
        streams: int = 1,
    ) -> TransferStats:
        if not local.is_dir():
            raise RemoteError(f"{local}: not a directory")
        return self._transfer(
            lambda s: transfer.put(s, self.python, local, remote, progress, exclude, streams)
        )

    def get_dir(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        return self._transfer(lambda s: transfer.get(s, self.python, remote, local, progress))

    def put_file(
        self, local: Path, remote: str, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        if not local.is_file():
            raise RemoteError(f"{local}: not a file")
        return self._transfer(lambda s: transfer.put(s, self.python, local, remote, progress))

    def get_file(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        return self._transfer(lambda s: transfer.get(s, self.python, remote, local, progress))

    def close(self) -> None:
        if self.openssh is not None:
            self.openssh.close()
        close_transport(self.transport)


class Ending:
    """When a running command must end (``stop`` set, ``timeout`` passed): its process
    group is killed once the command said which it is; if it never says, the run is
    given up after the kill grace period."""

    def __init__(
        self, stop: threading.Event | None, timeout: float | None, kill: Callable[[int], None]
    ) -> None:
        self.stop = stop
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.kill = kill
        self.ended: int | None = None  # EXIT_STOPPED / EXIT_TIMEOUT once it must end
        self.give_up = float("inf")

    def poll(self, out: Demux) -> int | None:
        """Called in the run loop; an exit status when the run must return at once."""
        if self.ended is None:
            self.ended = why_end(self.stop, self.deadline)
            self.give_up = time.monotonic() + KILL_GRACE_S + 10
        if self.ended is not None and not out.killed and out.pgid is not None:
            self.kill(out.pgid)
            out.killed = True
        if self.ended is not None and time.monotonic() > self.give_up:
            return self.ended  # it never said which process group to kill: drop it
        return None


def why_end(stop: threading.Event | None, deadline: float | None) -> int | None:
    if stop is not None and stop.is_set():
        return EXIT_STOPPED
    if deadline is not None and time.monotonic() >= deadline:
        return EXIT_TIMEOUT
    return None


def _drain(chan: paramiko.Channel, on_stdout: OutputFn, on_stderr: OutputFn | None) -> None:
    while chan.recv_ready():
        on_stdout(chan.recv(65536))
    while chan.recv_stderr_ready():
        data = chan.recv_stderr(65536)
        if on_stderr:
            on_stderr(data)


def _finished(chan: paramiko.Channel) -> bool:
    """Exited, and everything it wrote before exiting has been read."""
    return chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready()


class Demux:
    """Strips compose()'s process-group line off the head of stdout (``.pgid``)."""

    def __init__(self, sink: OutputFn | None) -> None:
        self.sink = sink
        self.head = b""
        self.pgid: int | None = None
        self.killed = False

    def feed(self, data: bytes) -> None:
        if self.pgid is None:
            self.head += data
            nl = self.head.find(b"\n")
            if nl < 0:
                return
            line, data = self.head[:nl], self.head[nl + 1 :]
            self.head = b""
            if line.startswith(_MARK):
                self.pgid = int(line[len(_MARK) :])
        if data and self.sink:
            self.sink(data)
