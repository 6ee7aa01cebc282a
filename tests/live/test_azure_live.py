"""Live Azure test: creates the smallest GPU VM, sees it running, tears it down.

Runs only with real Azure credentials (service principal env vars, workload identity or
an `az login`, plus a subscription) AND ``CLOUDGPU_LIVE=1`` (tests/live/live_kit.py);
skipped everywhere else, CI included. Costs one Standard_NC4as_T4_v3 for a few minutes
(about $0.05). Region: CLOUDGPU_AZURE_REGION (default eastus).
"""

from __future__ import annotations

from cloudgpu_providers.azure import AzureProvider
from cloudgpu_providers.azure.auth import detect

from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, ProviderContext
from tests.live.live_kit import ENV, job_name, live_marks, live_request, torn_down

SIZE = "Standard_NC4as_T4_v3"


def _enabled() -> bool:
    found = detect(ENV, {})
    return found.source is not None and bool(found.subscription_id)


pytestmark = live_marks("live Azure test: needs Azure credentials, a subscription", _enabled)


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
    job = job_name()
    # No idempotency token, as before: Azure's create is a PUT by name, idempotent anyway.
    inst = provider.create(live_request(offers[0], job, disk_gb=64, idempotency_token=""))
    with torn_down(provider, inst, job):
        assert inst.ssh is not None and inst.ssh.host
        assert [i.id for i in provider.list_instances({TAG_JOB: job})] == [inst.id]
