"""Where a job's lifecycle messages, its own output and transfer progress go.

:class:`Sink` is what the lifecycle writes to; :class:`JobLog` is the usual one: every
byte goes to the job's log file (so `cloudgpu logs` and `logs -f` see it) and, unless
the job runs detached, to the terminal. Lifecycle lines are prefixed with ``[cloudgpu]``
so they are told apart from the job's own output. Nothing secret is written: lifecycle
messages pass through redact().
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

from cloudgpu.errors import redact

PREFIX = "[cloudgpu] "


class Sink(Protocol):
    def info(self, message: str) -> None:
        """A lifecycle message (one line)."""

    def job_output(self, data: bytes, *, stderr: bool = False) -> None:
        """Bytes the job printed."""

    def progress(self, label: str, done: int, total: int) -> None:
        """A transfer advanced: ``done`` of ``total`` bytes."""


class JobLog:
    """Sink writing to a log file and, optionally, to the terminal."""

    def __init__(
        self,
        path: Path,
        *,
        terminal: bool = True,
        out: BinaryIO | None = None,
        err: BinaryIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("ab", buffering=0)
        self._terminal = terminal
        self._out = out or sys.stdout.buffer
        self._err = err or sys.stderr.buffer
        self._lock = threading.Lock()
        self._clock = clock
        self._bar: _Bar | None = None

    def info(self, message: str) -> None:
        line = (PREFIX + redact(message) + "\n").encode()
        with self._lock:
            self._end_bar()
            self._file.write(line)
            if self._terminal:
                _write(self._err, line)

    def job_output(self, data: bytes, *, stderr: bool = False) -> None:
        with self._lock:
            self._end_bar()
            self._file.write(data)
            if self._terminal:
                _write(self._err if stderr else self._out, data)

    def progress(self, label: str, done: int, total: int) -> None:
        with self._lock:
            if self._bar is None or self._bar.label != label:
                self._end_bar()
                self._bar = _Bar(label, self._clock())
            text = self._bar.render(done, total, self._clock())
            if text is not None and self._terminal and self._err.isatty():
                _write(self._err, ("\r" + text).encode())
            if done >= total:
                self._end_bar()

    def _end_bar(self) -> None:
        if self._bar is None:
            return
        bar, self._bar = self._bar, None
        summary = bar.summary(self._clock())
        self._file.write((PREFIX + summary + "\n").encode())
        if self._terminal:
            prefix = b"\r" if self._err.isatty() else b""
            _write(self._err, prefix + (PREFIX + summary + "\n").encode())

    def close(self) -> None:
        with self._lock:
            self._end_bar()
            self._file.close()


class _Bar:
    """A progress bar with bytes/s and ETA, redrawn at most 10 times a second."""

    def __init__(self, label: str, start: float) -> None:
        self.label = label
        self.start = start
        self.last_draw = 0.0
        self.done = 0
        self.total = 0

    def render(self, done: int, total: int, now: float) -> str | None:
        self.done, self.total = done, total
        if now - self.last_draw < 0.1 and done < total:
            return None
        self.last_draw = now
        elapsed = max(now - self.start, 1e-6)
        rate = done / elapsed
        frac = done / total if total else 1.0
        eta = (total - done) / rate if rate > 0 else 0.0
        filled = int(frac * 24)
        return (
            f"{PREFIX}{self.label} [{'#' * filled}{'.' * (24 - filled)}] {frac:4.0%} "
            f"{human_bytes(done)}/{human_bytes(total)} {human_bytes(rate)}/s ETA {eta:4.0f}s"
        )

    def summary(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-6)
        return (
            f"{self.label}: {human_bytes(self.done)} in {elapsed:.1f} s "
            f"({human_bytes(self.done / elapsed)}/s)"
        )


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _write(stream: BinaryIO, data: bytes) -> None:
    try:
        stream.write(data)
        stream.flush()
    except (BrokenPipeError, ValueError, OSError):
        pass  # a closed terminal must not stop the job or its teardown
