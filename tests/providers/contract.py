"""The shared provider contract suite. Every provider's tests subclass ProviderContract.

A subclass supplies two fixtures:

* ``provider``: a ready Provider instance talking to real local parts (a loopback sshd,
  moto's server, a loopback HTTP server replaying the real API's shapes);
* ``offer``: an Offer that provider can create right now.

tests/providers/test_contract_coverage.py fails when a registered provider has no
subclass of this suite (looked up by the class attribute ``provider_name``).
"""

from __future__ import annotations

import math
import time
import uuid

import pytest

from cloudgpu.batch import BatchJob
from cloudgpu.catalog.offer import FLAG_FREE_TIER, MARKETS, Offer
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_JOB,
    TAG_OWNER,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)

SUBCLASSES: list[type] = []


class ProviderContract:
    provider_name: str = ""
    # Seconds to wait for an instance to leave PENDING in wait_running().
    ready_timeout: float = 60.0

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        SUBCLASSES.append(cls)

    # -- helpers ---------------------------------------------------------------------

    def request(self, offer: Offer, job: str | None = None) -> CreateRequest:
        job = job or f"contract-{uuid.uuid4().hex[:8]}"
        return CreateRequest(
            offer=offer,
            name=job,
            tags={
                TAG_JOB: job,
                TAG_OWNER: "contract-test",
                TAG_EXPIRES: str(int(time.time()) + 3600),
            },
            ssh_public_key="",
            idempotency_token=uuid.uuid4().hex,
            deadline=time.time() + 3600,
            # Batch providers take the job itself; a run long enough to be seen running.
            batch=BatchJob(job_id=job, setup="", run="sleep 60"),
        )

    def wait_running(self, provider: Provider, instance_id: str) -> Instance:
        deadline = time.monotonic() + self.ready_timeout
        inst = provider.describe(instance_id)
        while inst.state == InstanceState.PENDING and time.monotonic() < deadline:
            time.sleep(0.2)
            inst = provider.describe(instance_id)
        return inst

    # -- the contract ----------------------------------------------------------------

    def test_name_and_capabilities(self, provider: Provider) -> None:
        assert provider.name == self.provider_name
        assert isinstance(provider.capabilities, Capabilities)

    def test_availability(self, provider: Provider) -> None:
        av = provider.availability()
        assert isinstance(av, Availability)
        assert av.enabled, av.reason
        assert av.reason

    def test_offer_invariants(self, provider: Provider) -> None:
        for o in provider.offers():
            assert o.provider == self.provider_name
            assert o.market in MARKETS
            assert o.gpu_count >= 1 and o.gpu
            free = FLAG_FREE_TIER in o.flags
            assert (o.price_per_hour > 0 or free) and math.isfinite(o.price_per_hour)
            if free:
                assert o.price_per_hour == 0 and "session_hours" in o.extra
            assert o.gpu_memory_gb > 0
            assert o.vcpus > 0 and o.memory_gb > 0
            assert o.observed_at
            if o.market == "spot":
                assert provider.capabilities.spot

    def test_create_describe_list_terminate(self, provider: Provider, offer: Offer) -> None:
        req = self.request(offer)
        inst = provider.create(req)
        try:
            assert inst.provider == self.provider_name
            assert inst.id
            for k, v in req.tags.items():
                assert inst.tags.get(k) == v
            running = self.wait_running(provider, inst.id)
            assert running.state == InstanceState.RUNNING
            reached = provider.capabilities.remote and not provider.capabilities.batch
            if reached and provider.open_machine(running) is None:
                assert running.ssh is not None and running.ssh.host
            found = provider.list_instances({TAG_JOB: req.tags[TAG_JOB]})
            assert [i.id for i in found] == [inst.id]
            assert provider.list_instances({TAG_JOB: "no-such-job"}) == []
        finally:
            provider.terminate(inst.id)
        gone = provider.describe(inst.id)
        assert gone.state.is_gone
        assert provider.list_instances({TAG_JOB: req.tags[TAG_JOB]}) == []
        provider.terminate(inst.id)  # idempotent

    def test_describe_unknown_is_terminated(self, provider: Provider) -> None:
        assert provider.describe("cgpu-does-not-exist-0000").state.is_gone


@pytest.fixture
def unique_job() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"
