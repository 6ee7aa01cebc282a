"""Live Vast.ai test: refreshes offers, rents the cheapest single-GPU machine, sees it
run, destroys it and checks it is gone.

Runs only with a real VAST_API_KEY AND ``CLOUDGPU_LIVE=1``, so a developer's key never
spends money by accident; skipped everywhere else, CI included. Costs one cheap
single-GPU container for a few minutes (cents).
"""

from __future__ import annotations

import os
import time

import pytest
from cloudgpu_providers.vast import VastProvider

from cloudgpu.errors import CapacityError
from cloudgpu.paths import Paths
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    InstanceState,
    ProviderContext,
)

# Read before tests/conftest.py strips cloud credentials from each test's environment.
ENV = dict(os.environ)

pytestmark = [
    pytest.mark.live,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        ENV.get("CLOUDGPU_LIVE") != "1" or not ENV.get("VAST_API_KEY"),
        reason="live Vast test: needs VAST_API_KEY and CLOUDGPU_LIVE=1",
    ),
]


def test_cheapest_gpu_container_is_created_and_torn_down(paths: Paths) -> None:
    provider = VastProvider(ProviderContext(config={"offer_limit": 200}, paths=paths, env=ENV))
    assert provider.check().enabled
    offers = sorted(
        (o for o in provider.fetch_offers() if o.gpu_count == 1 and o.market == "on_demand"),
        key=lambda o: o.price_per_hour,
    )
    assert offers, "Vast listed no single-GPU offer"
    job = f"live-{int(time.time())}"
    inst = None
    for offer in offers[:10]:  # the cheapest machines are often rented within seconds
        req = CreateRequest(
            offer=offer,
            name=job,
            disk_gb=20,
            deadline=time.time() + 1800,
            idempotency_token=os.urandom(16).hex(),
            tags={
                TAG_JOB: job,
                TAG_OWNER: "cloudgpu-live-test",
                TAG_EXPIRES: str(int(time.time()) + 1800),
            },
        )
        try:
            inst = provider.create(req)
            break
        except CapacityError:
            continue
    assert inst is not None, "none of the ten cheapest single-GPU offers could be rented"
    try:
        deadline = time.monotonic() + 900
        while provider.describe(inst.id).state == InstanceState.PENDING:
            assert time.monotonic() < deadline, "container did not start within 15 minutes"
            time.sleep(10)
        running = provider.describe(inst.id)
        assert running.state == InstanceState.RUNNING and running.ssh is not None
        assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state == InstanceState.TERMINATED
    assert provider.list_instances({TAG_JOB: job}) == []
