"""Live GCP test: refreshes prices, creates the smallest GPU VM, sees it run, tears it down.

Runs only with real Application Default Credentials, a project, AND ``CLOUDGPU_LIVE=1``
(tests/live/live_kit.py); skipped everywhere else, CI included. Costs one n1-standard-4
+ 1 x T4 for a few minutes (about $0.05). Zone: CLOUDGPU_GCP_ZONE (default
us-central1-a); the SSH rule admits only this machine's /32.
"""

from __future__ import annotations

from cloudgpu_providers.gcp import GCPProvider

from cloudgpu.paths import Paths, default_paths
from cloudgpu.provider import ProviderContext
from tests.live.live_kit import (
    ENV,
    job_name,
    live_marks,
    live_request,
    running_and_listed,
    torn_down,
)

SHAPE = "n1-standard-4+1xnvidia-tesla-t4"


def _enabled() -> bool:
    probe = GCPProvider(ProviderContext(config={}, paths=default_paths(ENV), env=ENV))
    return probe.availability().enabled


pytestmark = live_marks("live GCP test: needs Application Default Credentials, a project", _enabled)


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
    job = job_name()
    inst = provider.create(live_request(offers[0], job, disk_gb=60))
    with torn_down(provider, inst, job):
        running_and_listed(provider, inst, job, timeout_s=600, poll_s=5, what="VM")
