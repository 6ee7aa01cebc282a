"""Scaffolding shared by the live cloud tests (tests/live/test_*_live.py).

A live test runs only when ``CLOUDGPU_LIVE=1`` AND the provider finds real credentials,
so a developer's login never spends money by accident; it is skipped everywhere else, CI
included. The environment is read here at import (collection) time, before
tests/conftest.py strips cloud credentials from each test's environment. This module
creates nothing by itself: the tests ask for one machine, and ``torn_down`` makes sure it
is removed and proven gone whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)

ENV = dict(os.environ)
OWNER = "cloudgpu-live-test"


def live_marks(reason: str, enabled: Callable[[], bool]) -> list[pytest.MarkDecorator]:
    """The module's pytestmark; ``enabled`` (credentials found) runs only when asked live."""
    return [
        pytest.mark.live,
        pytest.mark.slow,
        pytest.mark.timeout(1800),
        pytest.mark.skipif(
            ENV.get("CLOUDGPU_LIVE") != "1" or not enabled(),
            reason=f"{reason} and CLOUDGPU_LIVE=1",
        ),
    ]


def job_name() -> str:
    return f"live-{int(time.time())}"


def live_request(offer: Offer, job: str, *, expires_in_s: int = 1800, **kw: Any) -> CreateRequest:
    """A request tagged as the live test's, due to end within ``expires_in_s``; ``kw``
    sets other fields (a fresh random idempotency token unless given)."""
    fields: dict[str, Any] = {
        "deadline": time.time() + 1800,
        "idempotency_token": os.urandom(16).hex(),
        **kw,
    }
    tags = {TAG_JOB: job, TAG_OWNER: OWNER, TAG_EXPIRES: str(int(time.time()) + expires_in_s)}
    return CreateRequest(offer=offer, name=job, tags=tags, **fields)


def first_created(
    provider: Provider, offers: Iterable[Offer], job: str, **kw: Any
) -> Instance | None:
    """Create on the first offer that has capacity (the cheap ones often have none)."""
    for offer in offers:
        try:
            return provider.create(live_request(offer, job, **kw))
        except CapacityError:
            continue
    return None


def running_and_listed(
    provider: Provider, inst: Instance, job: str, *, timeout_s: float, poll_s: float, what: str
) -> Instance:
    """Wait out PENDING; the instance must then run, have an SSH address and be listed."""
    deadline = time.monotonic() + timeout_s
    while provider.describe(inst.id).state == InstanceState.PENDING:
        assert time.monotonic() < deadline, f"{what} did not start within {timeout_s:.0f} s"
        time.sleep(poll_s)
    running = provider.describe(inst.id)
    assert running.state == InstanceState.RUNNING
    assert running.ssh is not None and running.ssh.host
    assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
    return running


@contextlib.contextmanager
def torn_down(
    provider: Provider,
    inst: Instance,
    job: str,
    gone: Callable[[InstanceState], bool] = lambda s: s.is_gone,
) -> Iterator[Instance]:
    """Terminate ``inst`` when the block ends, however it ends; after a block that
    passed, prove it gone and that nothing tagged with ``job`` is left."""
    try:
        yield inst
    finally:
        provider.terminate(inst.id)
    assert gone(provider.describe(inst.id).state)
    assert provider.list_instances({TAG_JOB: job}) == []


def cheapest_single_gpu_round_trip(
    provider: Provider,
    *,
    tries: int,
    what: str,
    poll_s: float,
    market: str | None = None,
    gone: Callable[[InstanceState], bool] = lambda s: s.is_gone,
    **kw: Any,
) -> None:
    """The marketplace providers' live test: create the cheapest single-GPU offer that
    has stock (of the ``tries`` cheapest), see it run and be listed, tear it down."""
    assert provider.check().enabled
    offers = sorted(
        (
            o
            for o in provider.fetch_offers()
            if o.gpu_count == 1 and (market is None or o.market == market)
        ),
        key=lambda o: o.price_per_hour,
    )
    assert offers, f"{provider.name} lists no single-GPU offer with capacity right now"
    job = job_name()
    inst = first_created(provider, offers[:tries], job, **kw)
    assert inst is not None, f"none of the {tries} cheapest single-GPU offers could be had"
    with torn_down(provider, inst, job, gone):
        running_and_listed(provider, inst, job, timeout_s=900, poll_s=poll_s, what=what)
