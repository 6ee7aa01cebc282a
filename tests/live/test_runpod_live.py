"""Live RunPod test: refreshes prices, deploys the cheapest GPU pod, sees it run, removes it.

Runs only with a real RUNPOD_API_KEY AND ``CLOUDGPU_LIVE=1`` (tests/live/live_kit.py);
skipped everywhere else, CI included. Costs one single-GPU Community Cloud pod for a few
minutes (a few cents).
"""

from __future__ import annotations

from cloudgpu_providers.runpod import RunPodProvider

from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from tests.live.live_kit import (
    ENV,
    first_created,
    job_name,
    live_marks,
    running_and_listed,
    torn_down,
)

pytestmark = live_marks(
    "live RunPod test: needs RUNPOD_API_KEY", lambda: bool(ENV.get("RUNPOD_API_KEY"))
)


def test_cheapest_gpu_pod_is_created_and_torn_down(paths: Paths) -> None:
    provider = RunPodProvider(ProviderContext(config={}, paths=paths, env=ENV))
    assert provider.check().enabled
    offers = sorted(
        (o for o in provider.fetch_offers() if o.gpu_count == 1),
        key=lambda o: o.price_per_hour,
    )
    assert offers, "RunPod listed no single-GPU offer"
    job = job_name()
    # The cheapest cards are often out of stock.
    inst = first_created(provider, offers[:10], job, disk_gb=20)
    assert inst is not None, "no stock for any of the ten cheapest single-GPU offers"
    with torn_down(provider, inst, job):
        running_and_listed(provider, inst, job, timeout_s=900, poll_s=5, what="pod")
