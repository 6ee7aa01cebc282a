"""Loaded (through PYTHONPATH) by every Python process of a run under libfaketime.

libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 breaks CPython's time.sleep
(clock_nanosleep on an absolute monotonic deadline fails with EINVAL); select() with a
relative timeout is not intercepted, so sleep is rebuilt on it. Nothing else changes:
the wall clock (time.time, datetime.now, `date`, sshd) is the faked one.
"""

import os

if os.environ.get("FAKETIME"):
    import select
    import time

    def _sleep(secs: float, _mono=time.monotonic, _select=select.select) -> None:  # type: ignore[no-untyped-def]
        end = _mono() + secs
        while (left := end - _mono()) > 0:
            _select([], [], [], left)

    time.sleep = _sleep
