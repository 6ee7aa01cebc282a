"""The GCP provider against the loopback Compute/Billing server, as the GCP test
modules share it: ``fake`` (the server), ``make_provider`` (an anonymous provider pointed
at it; ``provider.sleeps`` records backoff waits), ``provider``, ``offers`` and ``offer``
fixtures, and ``by_key``. A module imports the fixtures it uses and names them in
``__all__`` for pytest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cloudgpu_providers.gcp import GCPProvider

from cloudgpu.catalog.offer import Offer
from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from tests.fixtures.gcp.server import FakeGCP


@pytest.fixture
def fake() -> Iterator[FakeGCP]:
    server = FakeGCP().start()
    yield server
    server.stop()


def make_provider(fake: FakeGCP, paths: Paths, **config: object) -> GCPProvider:
    sleeps: list[float] = []
    ctx = ProviderContext(
        config={
            "project": fake.project,
            "anonymous": True,
            "endpoint_url": fake.endpoint,
            "ssh_cidr": "198.51.100.7/32",
            "poll_s": 0.0,
            **config,
        },
        paths=paths,
        env={"HOME": str(paths.data_dir)},
        sleep=sleeps.append,
    )
    provider = GCPProvider(ctx)
    provider.sleeps = sleeps  # type: ignore[attr-defined]
    return provider


@pytest.fixture
def provider(fake: FakeGCP, paths: Paths) -> GCPProvider:
    return make_provider(fake, paths)


@pytest.fixture
def offers(provider: GCPProvider) -> list[Offer]:
    return provider.fetch_offers()


@pytest.fixture
def offer(offers: list[Offer]) -> Offer:
    return next(o for o in offers if o.instance_type == "a2-highgpu-1g" and o.market == "on_demand")


def by_key(offers: list[Offer]) -> dict[tuple[str, str, str], Offer]:
    return {(o.instance_type, o.zone, o.market): o for o in offers}
