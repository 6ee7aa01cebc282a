"""Live Lambda test: refreshes prices, launches the cheapest available GPU VM, sees it
run, terminates it and checks it is gone.

Runs only with a real LAMBDA_API_KEY AND ``CLOUDGPU_LIVE=1``, so a developer's key never
spends money by accident; skipped everywhere else, CI included. Costs one single-GPU VM
for a few minutes (Lambda bills by the minute: well under a dollar).
"""

from __future__ import annotations

import os
import time

import pytest
from cloudgpu_providers.lambda_cloud import LambdaProvider

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
        ENV.get("CLOUDGPU_LIVE") != "1" or not ENV.get("LAMBDA_API_KEY"),
        reason="live Lambda test: needs LAMBDA_API_KEY and CLOUDGPU_LIVE=1",
    ),
]


def test_cheapest_gpu_vm_is_created_and_torn_down(paths: Paths) -> None:
    provider = LambdaProvider(ProviderContext(config={}, paths=paths, env=ENV))
    assert provider.check().enabled
    offers = sorted(
        (o for o in provider.fetch_offers() if o.gpu_count == 1),
        key=lambda o: o.price_per_hour,
    )
    assert offers, "Lambda has no single-GPU type with capacity right now"
    job = f"live-{int(time.time())}"
    inst = None
    for offer in offers[:5]:
        req = CreateRequest(
            offer=offer,
            name=job,
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
    assert inst is not None, "no capacity for any of the five cheapest single-GPU offers"
    try:
        deadline = time.monotonic() + 900
        while provider.describe(inst.id).state == InstanceState.PENDING:
            assert time.monotonic() < deadline, "VM did not boot within 15 minutes"
            time.sleep(10)
        running = provider.describe(inst.id)
        assert running.state == InstanceState.RUNNING and running.ssh is not None
        assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state.is_gone
    assert provider.list_instances({TAG_JOB: job}) == []
