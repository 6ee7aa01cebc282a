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
from tests.live.live_kit import (
    ENV,
    first_created,
    job_name,
    live_marks,
    running_and_listed,
    torn_down,
)

pytestmark = live_marks("live Vast test: needs VAST_API_KEY", lambda: bool(ENV.get("VAST_API_KEY")))


def test_cheapest_gpu_container_is_created_and_torn_down(paths: Paths) -> None:
    provider = VastProvider(ProviderContext(config={"offer_limit": 200}, paths=paths, env=ENV))
    assert provider.check().enabled
    offers = sorted(
        (o for o in provider.fetch_offers() if o.gpu_count == 1 and o.market == "on_demand"),
        key=lambda o: o.price_per_hour,
    )
    assert offers, "Vast listed no single-GPU offer"
    job = job_name()
    # The cheapest machines are often rented within seconds.
    inst = first_created(provider, offers[:10], job, disk_gb=20)
    assert inst is not None, "none of the ten cheapest single-GPU offers could be rented"
    with torn_down(provider, inst, job, gone=lambda s: s == InstanceState.TERMINATED):
        running_and_listed(provider, inst, job, timeout_s=900, poll_s=10, what="container")
