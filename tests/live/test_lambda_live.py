"""Live Lambda test: refreshes prices, launches the cheapest available GPU VM, sees it
run, terminates it and checks it is gone.

Runs only with a real LAMBDA_API_KEY AND ``CLOUDGPU_LIVE=1`` (tests/live/live_kit.py);
skipped everywhere else, CI included. Costs one single-GPU VM for a few minutes (Lambda
bills by the minute: well under a dollar).
"""

from __future__ import annotations

from cloudgpu_providers.lambda_cloud import LambdaProvider

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
    "live Lambda test: needs LAMBDA_API_KEY", lambda: bool(ENV.get("LAMBDA_API_KEY"))
)


def test_cheapest_gpu_vm_is_created_and_torn_down(paths: Paths) -> None:
    provider = LambdaProvider(ProviderContext(config={}, paths=paths, env=ENV))
    assert provider.check().enabled
    offers = sorted(
        (o for o in provider.fetch_offers() if o.gpu_count == 1),
        key=lambda o: o.price_per_hour,
    )
    assert offers, "Lambda has no single-GPU type with capacity right now"
    job = job_name()
    inst = first_created(provider, offers[:5], job)
    assert inst is not None, "no capacity for any of the five cheapest single-GPU offers"
    with torn_down(provider, inst, job):
        running_and_listed(provider, inst, job, timeout_s=900, poll_s=10, what="VM")
