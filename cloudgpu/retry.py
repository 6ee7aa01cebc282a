"""The one retry loop: exponential backoff with jitter, for every call worth repeating.

A call asks for another try by raising :class:`Retry` (with the error to raise when the
tries run out, and optionally the wait the server asked for, e.g. ``Retry-After``).
:func:`retrying` waits ``base_s * 2**n`` capped at ``max_s``, less a random share of up
to ``jitter`` of it ("equal jitter"), so many clients throttled at once do not come back
in lock step; a server-given wait is honoured as given. It stops after ``attempts`` tries
or, with a ``deadline``, when the next wait would pass it. The sleep, the clock and the
randomness are passed in, so tests never wait. Used by cloudgpu.httpjson (RunPod, Lambda,
Vast), the GitHub client, the GCP clients and the SSH connect loop. What is safe to
repeat is the caller's decision, never this module's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


class Retry(Exception):
    """Raised by the repeated call: try again, or raise ``error`` when out of tries."""

    def __init__(self, error: BaseException, wait_s: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait_s = wait_s  # the server's own wait, honoured instead of the backoff


@dataclass(frozen=True)
class Backoff:
    attempts: int | None = 5  # None: until the deadline
    base_s: float = 1.0
    max_s: float = 30.0
    jitter: float = 0.5  # share of each computed wait that is randomized (0 = none)

    def wait_s(self, n: int, rng: random.Random) -> float:
        """The wait after failed try ``n`` (0-based)."""
        full = min(self.max_s, self.base_s * (2.0**n))
        return full - rng.uniform(0.0, self.jitter * full) if self.jitter else full


def retrying(
    call: Callable[[], T],
    backoff: Backoff,
    *,
    sleep: Callable[[float], None] = time.sleep,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> T:
    """``call()``, repeated while it raises :class:`Retry` (see the module docstring)."""
    rng = rng or random.Random()
    n = 0
    while True:
        try:
            return call()
        except Retry as exc:
            wait = backoff.wait_s(n, rng) if exc.wait_s is None else exc.wait_s
            n += 1
            out_of_tries = backoff.attempts is not None and n >= backoff.attempts
            if out_of_tries or (deadline is not None and clock() + wait >= deadline):
                raise exc.error from (exc.error.__cause__ or exc.__cause__)
            sleep(wait)
