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
from tests.live.live_kit import ENV, cheapest_single_gpu_round_trip, live_marks

pytestmark = live_marks(
    "live Lambda test: needs LAMBDA_API_KEY", lambda: bool(ENV.get("LAMBDA_API_KEY"))
)


def test_cheapest_gpu_vm_is_created_and_torn_down(paths: Paths) -> None:
    provider = LambdaProvider(ProviderContext(config={}, paths=paths, env=ENV))
    cheapest_single_gpu_round_trip(provider, tries=5, what="VM", poll_s=10)
