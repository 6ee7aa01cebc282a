"""Where a job's lifecycle messages, its own output and transfer progress go.

:class:`Sink` is what the lifecycle writes to; :class:`JobLog` is the usual one: every
byte goes to the job's log file (so `cloudgpu logs` and `logs -f` see it) and, unless
the job runs detached, to the terminal. Lifecycle lines are prefixed with ``[cloudgpu]``
so they are told apart from the job's own output. Nothing secret is written: lifecycle
messages pass through redact().
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

from cloudgpu.atomicfile import append_private
from cloudgpu.errors import redact

PREFIX = "[cloudgpu] "
CLEAR_EOL = "\x1b[K"  # erase to the end of the line (ECMA-48 EL)
BAR_WIDTH = 24
MIN_RATE_S = 0.5  # a rate measured over less time is noise (the first chunk is buffered)


class Sink(Protocol):
    def info(self, message: str, *, detail: bool = False) -> None:
        """A lifecycle message (one line). ``detail``: for the log (and ``-v``), not for
        the terminal by default, e.g. the bootstrap's nvme=... summary."""

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
        verbose: bool = False,
        out: BinaryIO | None = None,
        err: BinaryIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = append_private(path)
        self._terminal = terminal
        self._verbose = verbose
        self._out = out or sys.stdout.buffer
        self._err = err or sys.stderr.buffer
        self._lock = threading.Lock()
        self._clock = clock
        self._bar: _Bar | None = None

    def info(self, message: str, *, detail: bool = False) -> None:
        line = (PREFIX + redact(message) + "\n").encode()
        with self._lock:
            self._end_bar()
            self._file.write(line)
            if self._terminal and (self._verbose or not detail):
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
            text = self._bar.render(done, total, self._clock(), self._columns())
            if text is not None and self._terminal and self._err.isatty():
                _write(self._err, (f"\r{text}{CLEAR_EOL}").encode())
            if done >= total:
                self._end_bar()

    def _end_bar(self) -> None:
        if self._bar is None:
            return
        bar, self._bar = self._bar, None
        summary = bar.summary(self._clock())
        self._file.write((PREFIX + summary + "\n").encode())
        if self._terminal:
            # Over the bar's own line, cleared to its end, so no bar text is left behind.
            prefix = b"\r" + CLEAR_EOL.encode() if self._err.isatty() else b""
            _write(self._err, prefix + (PREFIX + summary + "\n").encode())

    def _columns(self) -> int:
        return shutil.get_terminal_size(fallback=(80, 24)).columns

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

    def render(self, done: int, total: int, now: float, columns: int = 80) -> str | None:
        """One line no wider than ``columns`` - 1 (a full line would wrap on some
        terminals); the rate and ETA wait for a sound first sample."""
        self.done, self.total = done, total
        if now - self.last_draw < 0.1 and done < total:
            return None
        self.last_draw = now
        elapsed = now - self.start
        frac = done / total if total else 1.0
        if elapsed >= MIN_RATE_S and done > 0:
            rate = done / elapsed
            speed = f"{human_bytes(rate)}/s ETA {(total - done) / rate:4.0f}s"
        else:
            speed = "--/s ETA --"
        tail = f"{frac:4.0%} {human_bytes(done)}/{human_bytes(total)} {speed}"
        limit = max(columns - 1, 20)
        head = f"{PREFIX}{self.label}"
        room = limit - len(head) - len(tail) - 4
        if room >= 8:
            width = min(BAR_WIDTH, room)
            filled = int(frac * width)
            return f"{head} [{'#' * filled}{'.' * (width - filled)}] {tail}"
        # No room for a bar: the numbers matter more than the whole label.
        keep = limit - len(tail) - 1
        if len(head) > keep:
            head = head[: max(keep - 1, 0)] + "…"
        return f"{head} {tail}"[:limit]

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
