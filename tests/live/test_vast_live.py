"""Live Vast.ai test: refreshes offers, rents the cheapest single-GPU machine, sees it
run, destroys it and checks it is gone.

Runs only with a real VAST_API_KEY AND ``CLOUDGPU_LIVE=1`` (tests/live/live_kit.py);
skipped everywhere else, CI included. Costs one cheap single-GPU container for a few
minutes (cents).
"""

from __future__ import annotations

from cloudgpu_providers.vast import VastProvider

from cloudgpu.paths import Paths
from cloudgpu.provider import InstanceState, ProviderContext
from tests.live.live_kit import ENV, cheapest_single_gpu_round_trip, live_marks

pytestmark = live_marks("live Vast test: needs VAST_API_KEY", lambda: bool(ENV.get("VAST_API_KEY")))


def test_cheapest_gpu_container_is_created_and_torn_down(paths: Paths) -> None:
    provider = VastProvider(ProviderContext(config={"offer_limit": 200}, paths=paths, env=ENV))
    # The cheapest machines are often rented within seconds: try the ten cheapest.
    cheapest_single_gpu_round_trip(
        provider,
        tries=10,
        what="container",
        poll_s=10,
        market="on_demand",
        gone=lambda s: s == InstanceState.TERMINATED,
        disk_gb=20,
    )
