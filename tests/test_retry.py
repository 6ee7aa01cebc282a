"""The one retry loop: backoff with jitter, server-given waits, attempts and deadlines."""

from __future__ import annotations

import random

import pytest

from cloudgpu.errors import TransientError
from cloudgpu.retry import Backoff, Retry, retrying


class Flaky:
    def __init__(self, fails: int, wait_s: float | None = None) -> None:
        self.fails, self.calls, self.wait_s = fails, 0, wait_s

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.fails:
            raise Retry(TransientError(f"try {self.calls} failed"), self.wait_s)
        return "ok"


def test_backs_off_exponentially_with_jitter_below_the_cap() -> None:
    waits: list[float] = []
    call = Flaky(4)
    policy = Backoff(attempts=5, base_s=1.0, max_s=5.0, jitter=0.5)
    assert retrying(call, policy, sleep=waits.append, rng=random.Random(7)) == "ok"
    assert call.calls == 5 and len(waits) == 4
    for n, w in enumerate(waits):
        full = min(5.0, 2.0**n)
        assert full * 0.5 <= w <= full
    assert len(set(waits)) == 4  # jittered: no two clients wait alike


def test_two_clients_do_not_retry_in_lock_step() -> None:
    a: list[float] = []
    b: list[float] = []
    retrying(Flaky(3), Backoff(), sleep=a.append, rng=random.Random(1))
    retrying(Flaky(3), Backoff(), sleep=b.append, rng=random.Random(2))
    assert a != b


def test_a_server_given_wait_is_honoured_exactly() -> None:
    waits: list[float] = []
    retrying(Flaky(2, wait_s=7.5), Backoff(), sleep=waits.append)
    assert waits == [7.5, 7.5]


def test_out_of_attempts_raises_the_last_error_itself() -> None:
    waits: list[float] = []
    with pytest.raises(TransientError, match="try 3 failed"):
        retrying(Flaky(10), Backoff(attempts=3, jitter=0), sleep=waits.append)
    assert waits == [1.0, 2.0]


def test_a_deadline_ends_the_tries_before_the_wait_would_pass_it() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    call = Flaky(100)
    with pytest.raises(TransientError):
        retrying(
            call,
            Backoff(attempts=None, base_s=1.0, max_s=4.0, jitter=0),
            sleep=sleep,
            deadline=10.0,
            clock=lambda: now[0],
        )
    assert now[0] <= 10.0 and call.calls == 4  # waited 1 + 2 + 4; the next 4 would pass 10
