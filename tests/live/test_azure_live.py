"""Live Azure test: creates the smallest GPU VM, sees it running, tears it down.

Runs only with real Azure credentials (service principal env vars, workload identity or
an `az login`, plus a subscription) AND ``CLOUDGPU_LIVE=1``, so a developer's login never
spends money by accident; skipped everywhere else, CI included. Costs one
Standard_NC4as_T4_v3 for a few minutes (about $0.05). Region: CLOUDGPU_AZURE_REGION
(default eastus).
"""

from __future__ import annotations

import os
import time

import pytest
from cloudgpu_providers.azure import AzureProvider
from cloudgpu_providers.azure.auth import detect

from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_EXPIRES, TAG_JOB, TAG_OWNER, CreateRequest, ProviderContext

# Read before tests/conftest.py strips cloud credentials from each test's environment.
ENV = dict(os.environ)
SIZE = "Standard_NC4as_T4_v3"

pytestmark = [
    pytest.mark.live,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        ENV.get("CLOUDGPU_LIVE") != "1"
        or detect(ENV, {}).source is None
        or not detect(ENV, {}).subscription_id,
        reason="live Azure test: needs Azure credentials, a subscription and CLOUDGPU_LIVE=1",
    ),
]


def test_smallest_gpu_vm_is_created_and_torn_down(paths: Paths) -> None:
    provider = AzureProvider(ProviderContext(config={}, paths=paths, env=ENV))
    assert provider.check().enabled
    region = ENV.get("CLOUDGPU_AZURE_REGION", "eastus")
    offers = [
        o
        for o in provider.fetch_offers()
        if o.instance_type == SIZE and o.region == region and o.market == "on_demand"
    ]
    assert offers, f"no {SIZE} price in {region}"
    job = f"live-{int(time.time())}"
    req = CreateRequest(
        offer=offers[0],
        name=job,
        disk_gb=64,
        deadline=time.time() + 1800,
        tags={
            TAG_JOB: job,
            TAG_OWNER: "cloudgpu-live-test",
            TAG_EXPIRES: str(int(time.time()) + 1800),
        },
    )
    inst = provider.create(req)
    try:
        assert inst.ssh is not None and inst.ssh.host
        assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state.is_gone
    assert provider.list_instances({TAG_JOB: job}) == []
