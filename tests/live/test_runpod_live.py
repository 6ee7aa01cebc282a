"""Live RunPod test: refreshes prices, deploys the cheapest GPU pod, sees it run, removes it.

Runs only with a real RUNPOD_API_KEY AND ``CLOUDGPU_LIVE=1``, so a developer's key never
spends money by accident; skipped everywhere else, CI included. Costs one single-GPU
Community Cloud pod for a few minutes (a few cents).
"""

from __future__ import annotations

import os
import time

import pytest
from cloudgpu_providers.runpod import RunPodProvider

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
        ENV.get("CLOUDGPU_LIVE") != "1" or not ENV.get("RUNPOD_API_KEY"),
        reason="live RunPod test: needs RUNPOD_API_KEY and CLOUDGPU_LIVE=1",
    ),
]


def test_cheapest_gpu_pod_is_created_and_torn_down(paths: Paths) -> None:
    provider = RunPodProvider(ProviderContext(config={}, paths=paths, env=ENV))
    assert provider.check().enabled
    offers = sorted(
        (o for o in provider.fetch_offers() if o.gpu_count == 1),
        key=lambda o: o.price_per_hour,
    )
    assert offers, "RunPod listed no single-GPU offer"
    job = f"live-{int(time.time())}"
    inst = None
    for offer in offers[:10]:  # the cheapest cards are often out of stock
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
    assert inst is not None, "no stock for any of the ten cheapest single-GPU offers"
    try:
        deadline = time.monotonic() + 900
        while provider.describe(inst.id).state == InstanceState.PENDING:
            assert time.monotonic() < deadline, "pod did not start within 15 minutes"
            time.sleep(5)
        running = provider.describe(inst.id)
        assert running.state == InstanceState.RUNNING and running.ssh is not None
        assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state.is_gone
    assert provider.list_instances({TAG_JOB: job}) == []
