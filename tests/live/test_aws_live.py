"""Live AWS test: confirms credentials, refreshes one region's prices, creates the
smallest GPU instance (g4dn.xlarge, one T4), sees it run, tears it down and proves it.

Runs only with real AWS credentials (env keys, a profile, SSO, or a role) AND
``CLOUDGPU_LIVE=1``, so a developer's login never spends money by accident; skipped
everywhere else, CI included. Costs one g4dn.xlarge for a few minutes (about $0.05).
Region: CLOUDGPU_AWS_REGION (default us-east-1); the SSH rule admits only this
machine's /32. Zones are tried in order past capacity errors, as the lifecycle does.
"""

from __future__ import annotations

import os
import time

import pytest
from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.aws.credentials import find_credentials

from cloudgpu.errors import CapacityError
from cloudgpu.paths import Paths
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    Instance,
    InstanceState,
    ProviderContext,
)

# Read before tests/conftest.py strips cloud credentials from each test's environment.
ENV = dict(os.environ)
REGION = ENV.get("CLOUDGPU_AWS_REGION", "us-east-1")
SMALLEST = "g4dn.xlarge"

pytestmark = [
    pytest.mark.live,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        ENV.get("CLOUDGPU_LIVE") != "1" or find_credentials(ENV).source is None,
        reason="live AWS test: needs AWS credentials and CLOUDGPU_LIVE=1",
    ),
]


def _provider(paths: Paths) -> AWSProvider:
    return AWSProvider(ProviderContext(config={"regions": [REGION]}, paths=paths, env=ENV))


def _create_somewhere(provider: AWSProvider, job: str) -> Instance:
    offers = sorted(
        (
            o
            for o in provider.fetch_offers()
            if o.instance_type == SMALLEST and o.market == "on_demand"
        ),
        key=lambda o: o.zone,
    )
    assert offers, f"no {SMALLEST} on-demand offer in {REGION}"
    tags = {
        TAG_JOB: job,
        TAG_OWNER: "cloudgpu-live-test",
        TAG_EXPIRES: str(int(time.time()) + 3600),
    }
    last: CapacityError | None = None
    for offer in offers:
        req = CreateRequest(
            offer=offer,
            name=job,
            tags=tags,
            disk_gb=100,
            idempotency_token=f"{job}-{offer.zone}",
            deadline=time.time() + 1800,
        )
        try:
            return provider.create(req)
        except CapacityError as exc:
            last = exc
    raise AssertionError(f"no capacity for {SMALLEST} in any zone of {REGION}: {last}")


def test_smallest_gpu_instance_is_created_and_torn_down(paths: Paths) -> None:
    provider = _provider(paths)
    assert provider.check().enabled
    job = f"live-{int(time.time())}"
    inst = _create_somewhere(provider, job)
    try:
        deadline = time.monotonic() + 600
        state = provider.describe(inst.id)
        while state.state == InstanceState.PENDING and time.monotonic() < deadline:
            time.sleep(5)
            state = provider.describe(inst.id)
        assert state.state == InstanceState.RUNNING
        assert state.ssh is not None and state.ssh.host
        assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state.is_gone
    assert provider.list_instances({TAG_JOB: job}) == []
    provider.terminate(inst.id)  # idempotent
