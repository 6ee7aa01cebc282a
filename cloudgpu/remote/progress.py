"""A one-line transfer progress bar: bytes, percent, rate and ETA.

:class:`ProgressBar` is a ``ProgressFn`` (``(done, total)``) that redraws at most every
``interval`` seconds on a text stream; :func:`render` is the pure formatting behind it,
so callers with their own UI can reuse the line. Nothing here touches the network.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

_UNITS = ("B", "KB", "MB", "GB", "TB")


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as network rates are quoted)."""
    for unit in _UNITS:
        if abs(n) < 1000 or unit == _UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # unreachable; keeps type checkers content


def human_seconds(s: float) -> str:
    secs = max(0, round(s))
    h, rest = divmod(secs, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def render(label: str, done: int, total: int, elapsed: float, width: int = 24) -> str:
    """``label [#####-----]  42%  1.2 GB / 2.9 GB  85.0 MB/s  ETA 0:20``."""
    frac = done / total if total > 0 else 1.0
    filled = int(frac * width)  # floor: the bar is full only when done
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else None
    parts = [
        f"{label} [{'#' * filled}{'-' * (width - filled)}]",
        f"{frac * 100:3.0f}%",
        f"{human_bytes(done)} / {human_bytes(total)}",
        f"{human_bytes(rate)}/s",
        f"ETA {human_seconds(eta)}" if eta is not None else "ETA --:--",
    ]
    return "  ".join(parts)


class ProgressBar:
    """Draws :func:`render` lines on ``out`` (carriage return on a terminal, else only
    the final line); use as ``machine.put_dir(..., progress=ProgressBar("data"))``."""

    def __init__(
        self,
        label: str,
        out: TextIO | None = None,
        *,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.out = out if out is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        self.start = clock()
        self.last = float("-inf")
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        final = done >= total
        if not final and now - self.last < self.interval:
            return
        self.last = now
        line = render(self.label, done, total, now - self.start)
        if self.tty:
            self.out.write("\r" + line + ("\n" if final else ""))
        elif final:
            self.out.write(line + "\n")
        self.out.flush()
