"""PodMachine: a cloudgpu Machine whose commands and files go through the Kubernetes exec
API (a websocket per command: the pod needs no sshd, no python, only sh and tar).

Channels follow the remote-command websocket protocol the official client speaks
(``v5.channel.k8s.io``, falling back to ``v4``; KEP-3396): 0 stdin, 1 stdout, 2 stderr,
3 a final metav1.Status (``Success``, or ``NonZeroExitCode`` with the exit code in
``details.causes[reason=ExitCode]``); v5 adds closing stdin (255). Commands are the same
shell text as over SSH (cloudgpu.remote.ssh.compose: the process-group line first, so a
stop kills the command's whole tree with a second exec). Transfers are tar streams
(cloudgpu.remote.tarstream); with a v4-only server stdin cannot be closed, which tar
does not need: it stops at the archive's end blocks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from cloudgpu.errors import RemoteError
from cloudgpu.remote import tarstream
from cloudgpu.remote.groupkill import kill_group
from cloudgpu.remote.machine import NVME_ENV, ExcludeFn, OutputFn, ProgressFn, TransferStats
from cloudgpu.remote.ssh import Demux, Ending, compose

STDOUT, STDERR, ERROR = 1, 2, 3


class WebSocketExec(Protocol):
    """What kubernetes.stream.ws_client.WSClient offers that we use."""

    def update(self, timeout: float = 0) -> None: ...
    def is_open(self) -> bool: ...
    def read_channel(self, channel: int, timeout: float = 0) -> Any: ...
    def write_stdin(self, data: Any) -> None: ...
    def close(self, **kwargs: Any) -> None: ...


OpenExec = Callable[[Sequence[str], bool], WebSocketExec]  # argv, with stdin


def exit_status(status_json: bytes | str) -> int:
    """The exit code in the error channel's final Status; RemoteError for any other end."""
    text = status_json.decode(errors="replace") if isinstance(status_json, bytes) else status_json
    if not text.strip():
        raise RemoteError("pod exec: the connection ended without an exit status")
    try:
        status = json.loads(text)
    except ValueError as exc:
        raise RemoteError(f"pod exec: unreadable status {text[:200]!r}") from exc
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"])
    raise RemoteError(f"pod exec: {status.get('message') or status.get('reason') or text[:200]}")


class ExecStream:
    """cloudgpu.remote.transfer.Stream over one exec websocket."""

    def __init__(self, ws: WebSocketExec) -> None:
        self.ws = ws
        self.err = b""
        self.status = b""

    def _pump(self, timeout: float) -> None:
        self.ws.update(timeout=timeout)
        self.err += self.ws.read_channel(STDERR) or b""
        self.status += self.ws.read_channel(ERROR) or b""

    def write(self, data: bytes) -> None:
        if not self.ws.is_open():
            raise BrokenPipeError("the exec stream closed")
        self.ws.write_stdin(data)

    def read(self, n: int) -> bytes:
        while True:
            data = self.ws.read_channel(STDOUT) or b""
            if data:
                return bytes(data)
            if not self.ws.is_open():
                return b""
            self._pump(1.0)

    def close_write(self) -> None:
        close = getattr(self.ws, "close_channel", None)  # v5 only; a no-op on v4
        if close is not None:
            close(0)

    def finish(self) -> tuple[int, str]:
        while self.ws.is_open():
            self._pump(1.0)
            self.ws.read_channel(STDOUT)  # nobody reads it any more
        self._pump(0)
        self.ws.close()
        try:
            return exit_status(self.status), self.err.decode(errors="replace")
        except RemoteError as exc:
            return 255, f"{self.err.decode(errors='replace')}\n{exc}"


class PodMachine:
    """A pod's container, as a Machine (see cloudgpu.remote.machine.Machine)."""

    def __init__(self, open_exec: OpenExec, label: str, *, nvme_path: str = "/nvme") -> None:
        self.open_exec = open_exec
        self.label = label  # "namespace/pod", for messages
        self.nvme_path = nvme_path

    def _stream(self, script: str) -> ExecStream:
        return ExecStream(self.open_exec(["sh", "-c", script], True))

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
        script = compose(command, {NVME_ENV: self.nvme_path, **(env or {})}, cwd)
        ws = self.open_exec(["sh", "-c", script], False)
        out = Demux(on_stdout)
        ending = Ending(stop, timeout, self._kill)
        status = b""
        try:
            while ws.is_open():
                if (gave_up := ending.poll(out)) is not None:
                    return gave_up
                ws.update(timeout=0.1)
                if data := ws.read_channel(STDOUT):
                    out.feed(bytes(data))
                if (data := ws.read_channel(STDERR)) and on_stderr:
                    on_stderr(bytes(data))
                status += ws.read_channel(ERROR) or b""
            if data := ws.read_channel(STDOUT):  # what arrived with the close
                out.feed(bytes(data))
            if (data := ws.read_channel(STDERR)) and on_stderr:
                on_stderr(bytes(data))
            status += ws.read_channel(ERROR) or b""
        finally:
            ws.close()
        if ending.ended is not None:
            return ending.ended
        return exit_status(status)

    def _kill(self, pgid: int) -> None:
        s = ExecStream(self.open_exec(["sh", "-c", kill_group(str(pgid))], False))
        s.finish()

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
        return tarstream.put(self._stream, local, remote, progress, exclude)  # one stream

    def get_dir(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        return tarstream.get(self._stream, remote, local, progress)

    def put_file(
        self, local: Path, remote: str, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        if not local.is_file():
            raise RemoteError(f"{local}: not a file")
        return tarstream.put(self._stream, local, remote, progress)

    def get_file(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        return tarstream.get(self._stream, remote, local, progress)

    def close(self) -> None:
        """Nothing to release: every command had its own websocket."""
