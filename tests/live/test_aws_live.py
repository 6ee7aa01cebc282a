"""Live AWS test: confirms credentials, refreshes one region's prices, creates the
smallest GPU instance (g4dn.xlarge, one T4), sees it run, tears it down and proves it.

Runs only with real AWS credentials (env keys, a profile, SSO, or a role) AND
``CLOUDGPU_LIVE=1``, so a developer's login never spends money by accident; skipped
everywhere else, CI included. Costs one g4dn.xlarge for a few minutes (about $0.05).
Region: CLOUDGPU_AWS_REGION (default us-east-1); the SSH rule admits only this
machine's /32. Zones are tried in order past capacity errors, as the lifecycle does.
CLOUDGPU_AWS_SUBNET / CLOUDGPU_AWS_VPC (optional) run it through `subnet_id` / `vpc_id`,
the path an account without a default VPC takes; without them the default subnet of
each zone is used (and a zone with none is skipped, as the lifecycle fails over).
"""

from __future__ import annotations

from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.aws.credentials import find_credentials

from cloudgpu.errors import CapacityError
from cloudgpu.paths import Paths
from cloudgpu.provider import Instance, ProviderContext
from tests.live.live_kit import (
    ENV,
    job_name,
    live_marks,
    live_request,
    running_and_listed,
    torn_down,
)

REGION = ENV.get("CLOUDGPU_AWS_REGION", "us-east-1")
SMALLEST = "g4dn.xlarge"

pytestmark = live_marks(
    "live AWS test: needs AWS credentials", lambda: find_credentials(ENV).source is not None
)


def _provider(paths: Paths) -> AWSProvider:
    config: dict[str, object] = {"regions": [REGION]}
    if ENV.get("CLOUDGPU_AWS_SUBNET"):
        config["subnet_id"] = ENV["CLOUDGPU_AWS_SUBNET"].split(",")
    if ENV.get("CLOUDGPU_AWS_VPC"):
        config["vpc_id"] = ENV["CLOUDGPU_AWS_VPC"]
    return AWSProvider(ProviderContext(config=config, paths=paths, env=ENV))


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
    last: CapacityError | None = None
    for offer in offers:
        # A token per zone: a retry in one zone must not find the attempt in another.
        req = live_request(
            offer, job, expires_in_s=3600, disk_gb=100, idempotency_token=f"{job}-{offer.zone}"
        )
        try:
            return provider.create(req)
        except CapacityError as exc:
            last = exc
    raise AssertionError(f"no capacity for {SMALLEST} in any zone of {REGION}: {last}")


def test_smallest_gpu_instance_is_created_and_torn_down(paths: Paths) -> None:
    provider = _provider(paths)
    assert provider.check().enabled
    job = job_name()
    inst = _create_somewhere(provider, job)
    with torn_down(provider, inst, job):
        running_and_listed(provider, inst, job, timeout_s=600, poll_s=5, what="instance")
    provider.terminate(inst.id)  # idempotent
