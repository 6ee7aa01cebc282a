"""Colab: rows for comparison only. It has no job API, so it is never enabled and
create() refuses with the reason; the shared contract's launch tests become refusals."""

from __future__ import annotations

import pytest
from cloudgpu_providers.colab import ColabProvider
from cloudgpu_providers.colab.provider import paid_tiers_note

from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.errors import ConfigError
from cloudgpu.paths import Paths
from cloudgpu.provider import Provider, ProviderContext
from cloudgpu.testing import ProviderContract


@pytest.fixture
def provider(paths: Paths) -> ColabProvider:
    return ColabProvider(ProviderContext(config={}, paths=paths, env={}))


@pytest.fixture
def offer(provider: ColabProvider) -> Offer:
    return provider.offers()[0]


class TestColabContract(ProviderContract):
    provider_name = "colab"

    def test_availability(self, provider: Provider) -> None:
        av = provider.availability()
        assert not av.enabled and "no public API" in av.reason

    def test_create_describe_list_terminate(self, provider: Provider, offer: Offer) -> None:
        with pytest.raises(ConfigError, match="no public API"):
            provider.create(self.request(offer))
        assert provider.list_instances({}) == []


def test_the_free_row_and_the_paid_tiers(provider: ColabProvider) -> None:
    (row,) = provider.offers()
    assert row.gpu == "T4" and row.price_per_hour == 0 and FLAG_FREE_TIER in row.flags
    assert row.extra["session_hours"] == 12
    note = paid_tiers_note()
    assert "$0.0999 each" in note and "Colab Pro+ $49.99 for 500 units" in note
