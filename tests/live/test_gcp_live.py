"""Live GCP test: refreshes prices, creates the smallest GPU VM, sees it run, tears it down.

Runs only with real Application Default Credentials, a project, AND ``CLOUDGPU_LIVE=1``,
so a developer's login never spends money by accident; skipped everywhere else, CI
included. Costs one n1-standard-4 + 1 x T4 for a few minutes (about $0.05). Zone:
CLOUDGPU_GCP_ZONE (default us-central1-a); the SSH rule admits only this machine's /32.
"""

from __future__ import annotations

import os
import time

import pytest
from cloudgpu_providers.gcp import GCPProvider

from cloudgpu.paths import Paths, default_paths
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
SHAPE = "n1-standard-4+1xnvidia-tesla-t4"


def _enabled() -> bool:
    probe = GCPProvider(ProviderContext(config={}, paths=default_paths(ENV), env=ENV))
    return probe.availability().enabled


pytestmark = [
    pytest.mark.live,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        ENV.get("CLOUDGPU_LIVE") != "1" or not _enabled(),
        reason="live GCP test: needs Application Default Credentials, a project and "
        "CLOUDGPU_LIVE=1",
    ),
]


def test_smallest_gpu_vm_is_created_and_torn_down(paths: Paths) -> None:
    provider = GCPProvider(ProviderContext(config={}, paths=paths, env=ENV))
    assert provider.check().enabled
    zone = ENV.get("CLOUDGPU_GCP_ZONE", "us-central1-a")
    offers = [
        o
        for o in provider.fetch_offers()
        if o.instance_type == SHAPE and o.zone == zone and o.market == "on_demand"
    ]
    assert offers, f"no priced {SHAPE} in {zone}"
    job = f"live-{int(time.time())}"
    req = CreateRequest(
        offer=offers[0],
        name=job,
        disk_gb=60,
        deadline=time.time() + 1800,
        idempotency_token=os.urandom(16).hex(),
        tags={
            TAG_JOB: job,
            TAG_OWNER: "cloudgpu-live-test",
            TAG_EXPIRES: str(int(time.time()) + 1800),
        },
    )
    inst = provider.create(req)
    try:
        deadline = time.monotonic() + 600
        while provider.describe(inst.id).state == InstanceState.PENDING:
            assert time.monotonic() < deadline, "VM did not start within 10 minutes"
            time.sleep(5)
        running = provider.describe(inst.id)
        assert running.state == InstanceState.RUNNING and running.ssh and running.ssh.host
        assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state.is_gone
    assert provider.list_instances({TAG_JOB: job}) == []
