"""Live RunPod test: refreshes prices, deploys the cheapest GPU pod, sees it run, removes it.

Runs only with a real RUNPOD_API_KEY AND ``CLOUDGPU_LIVE=1`` (tests/live/live_kit.py);
skipped everywhere else, CI included. Costs one single-GPU Community Cloud pod for a few
minutes (a few cents).
"""

from __future__ import annotations

from cloudgpu_providers.runpod import RunPodProvider

from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from tests.live.live_kit import ENV, cheapest_single_gpu_round_trip, live_marks

pytestmark = live_marks(
    "live RunPod test: needs RUNPOD_API_KEY", lambda: bool(ENV.get("RUNPOD_API_KEY"))
)


def test_cheapest_gpu_pod_is_created_and_torn_down(paths: Paths) -> None:
    provider = RunPodProvider(ProviderContext(config={}, paths=paths, env=ENV))
    # The cheapest cards are often out of stock: try the ten cheapest.
    cheapest_single_gpu_round_trip(provider, tries=10, what="pod", poll_s=5, disk_gb=20)
