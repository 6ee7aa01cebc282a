"""Azure live refresh: the Retail Prices API (loopback server replaying recorded pages)
joined with the bundled size table, or with resource_skus.list through the fake ARM."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cloudgpu_providers.azure import AzureProvider
from cloudgpu_providers.azure.retail import FILTER, build_offers
from cloudgpu_providers.azure.sizes import (
    SizeSpec,
    bundled_sizes,
    gpu_from_size_name,
    infiniband_gbps,
)

from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer
from cloudgpu.errors import AuthError, TransientError
from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from tests.fixtures.azure.fake_arm import FakeArm, provider_config
from tests.fixtures.azure.fake_retail import FakeRetail
from tests.fixtures.azure.support import StaticToken


@pytest.fixture
def retail() -> Iterator[FakeRetail]:
    with FakeRetail() as fake:
        yield fake


def offline_provider(retail: FakeRetail, paths: Paths, sleeps: list[float]) -> AzureProvider:
    ctx = ProviderContext(
        config={"retail_prices_url": retail.url}, paths=paths, env={}, sleep=sleeps.append
    )
    return AzureProvider(ctx)


def by_key(offers: list[Offer]) -> dict[tuple[str, str, str], float]:
    return {(o.instance_type, o.region, o.market): o.price_per_hour for o in offers}


def test_refresh_without_credentials_uses_bundled_sizes(retail: FakeRetail, paths: Paths) -> None:
    provider = offline_provider(retail, paths, [])
    assert not provider.availability().enabled
    offers = provider.fetch_offers()
    assert by_key(offers) == {
        ("Standard_NC24ads_A100_v4", "eastus", "on_demand"): 3.673,
        ("Standard_NC24ads_A100_v4", "eastus", "spot"): 0.7346,  # not the Low Priority row
        ("Standard_ND96isr_H100_v5", "eastus", "on_demand"): 98.32,  # the newest price row
        ("Standard_ND96isr_H100_v5", "eastus", "spot"): 29.496,  # from page 2 (NextPageLink)
        ("Standard_NC4as_T4_v3", "westeurope", "on_demand"): 0.526,
        ("Standard_NC4as_T4_v3", "westeurope", "spot"): 0.1578,
    }
    gpus = {o.instance_type: (o.gpu, o.gpu_count, o.gpu_memory_gb, o.vcpus) for o in offers}
    assert gpus["Standard_ND96isr_H100_v5"] == ("H100-SXM", 8, 80.0, 96.0)
    assert gpus["Standard_NC24ads_A100_v4"] == ("A100-80GB-PCIe", 1, 80.0, 24.0)
    assert gpus["Standard_NC4as_T4_v3"] == ("T4", 1, 16.0, 4.0)
    # No SKU data: InfiniBand from the size docs.
    ib = {o.instance_type: o.network_gbps for o in offers if o.market == "on_demand"}
    assert (ib["Standard_ND96isr_H100_v5"], ib["Standard_NC4as_T4_v3"]) == (3200.0, 0.0)
    spot = {o.instance_type: o.network_gbps for o in offers if o.market == "spot"}
    assert spot["Standard_ND96isr_H100_v5"] == 0.0  # spot nodes join no availability set
    assert all(o.provider == "azure" and o.observed_at and not o.flags for o in offers)
    assert provider.unpriced_sizes == ["Standard_NC999_Future_v9"]
    assert len(retail.server.queries) == 2
    assert "%24filter=" in retail.server.queries[0]


def test_filter_asks_for_linux_consumption_rows_only() -> None:
    assert "priceType eq 'Consumption'" in FILTER
    assert "contains(productName, 'Windows') eq false" in FILTER
    assert "contains(meterName, 'Low Priority') eq false" in FILTER


def test_throttling_and_unavailability_are_retried_with_backoff(
    retail: FakeRetail, paths: Paths
) -> None:
    retail.server.fail_status_next = [429, 503]
    sleeps: list[float] = []
    offers = offline_provider(retail, paths, sleeps).fetch_offers()
    assert len(offers) == 6
    assert sleeps == [0.0, 0.0]  # the server's Retry-After: 0 was honoured


def test_persistent_503_is_a_transient_error(retail: FakeRetail, paths: Paths) -> None:
    retail.server.fail_status_next = [503] * 10
    sleeps: list[float] = []
    with pytest.raises(TransientError, match="HTTP 503"):
        offline_provider(retail, paths, sleeps).fetch_offers()
    assert len(sleeps) == 5


def test_auth_failure_is_an_auth_error(retail: FakeRetail, paths: Paths) -> None:
    retail.server.fail_status_next = [401]
    with pytest.raises(AuthError):
        offline_provider(retail, paths, []).fetch_offers()


def test_unreachable_price_api_is_transient(paths: Paths) -> None:
    ctx = ProviderContext(
        config={"retail_prices_url": "http://127.0.0.1:9/api/retail/prices"},
        paths=paths,
        env={},
        sleep=lambda s: None,
    )
    with pytest.raises(TransientError, match="unreachable"):
        AzureProvider(ctx).fetch_offers()


def test_refresh_with_credentials_joins_resource_skus(
    retail: FakeRetail, paths: Paths, tmp_path: Path
) -> None:
    with FakeArm(tmp_path) as arm:
        cfg = provider_config(arm, retail_prices_url=retail.url)
        ctx = ProviderContext(config=cfg, paths=paths, env={}, sleep=lambda s: None)
        offers = AzureProvider(ctx, credential=StaticToken()).fetch_offers()
        sku_calls = [p for m, p, _ in arm.state.requests if p.lower().endswith("/skus")]
    assert len(sku_calls) == 2  # both pages of resource_skus.list (nextLink)
    h100 = next(o for o in offers if o.instance_type == "Standard_ND96isr_H100_v5")
    assert (h100.vcpus, h100.memory_gb, h100.gpu_count) == (96.0, 1900.0, 8)
    assert h100.nvme_count == 8  # local NVMe comes from the size docs, not the API
    # RdmaEnabled True: InfiniBand, at the size docs' 8x 400 Gb/s, for the planner's
    # interconnect model; the A100 v4 NC size says RdmaEnabled False.
    a100 = next(o for o in offers if o.instance_type == "Standard_NC24ads_A100_v4")
    assert (h100.network_gbps, a100.network_gbps) == (3200.0, 0.0)
    # NC4as_T4_v3 is NotAvailableForSubscription in westeurope: its offers are left out.
    assert not [o for o in offers if o.region == "westeurope"]
    assert len(offers) == 4


def test_size_names_give_the_gpu_model() -> None:
    assert gpu_from_size_name("Standard_ND96isr_H100_v5") == ("H100", 80.0)
    assert gpu_from_size_name("Standard_ND96amsr_A100_v4") == ("A100", 80.0)
    assert gpu_from_size_name("Standard_NC6s_v3") == ("V100", 16.0)
    assert gpu_from_size_name("Standard_D4s_v5") is None
    table = bundled_sizes()
    for spec in table.values():
        assert gpu_from_size_name(spec.name) == (spec.gpu_model, spec.gpu_memory_gb), spec.name


def test_unknown_gpu_is_flagged_not_dropped(retail: FakeRetail, paths: Paths) -> None:
    item = {
        "armSkuName": "Standard_NV8_Odd_v1",
        "armRegionName": "eastus",
        "meterName": "NV8 Odd v1",
        "productName": "Virtual Machines NV Odd Series",
        "retailPrice": 1.0,
        "type": "Consumption",
        "currencyCode": "USD",
        "unitOfMeasure": "1 Hour",
    }
    sizes = {"standard_nv8_odd_v1": SizeSpec("Standard_NV8_Odd_v1", 8, 56, 1, "Oddity", 12)}
    offers, missing = build_offers(iter([item]), sizes, lambda raw, mem: None)
    assert missing == [] and offers[0].flags == (FLAG_UNKNOWN_GPU,)
    assert offers[0].gpu == "Oddity"


@pytest.mark.parametrize(
    ("size", "rdma", "gbps"),
    [
        ("Standard_ND96isr_H100_v5", True, 3200.0),
        ("Standard_ND96isr_H100_v5", False, 0.0),  # the SKU has the last word
        ("Standard_ND96amsr_A100_v4", None, 1600.0),  # no SKU data: the size docs
        ("Standard_HB120rs_v3", True, 100.0),  # RDMA, bandwidth not in the table
        ("Standard_NC24ads_A100_v4", None, 0.0),
    ],
)
def test_infiniband_comes_from_rdma_enabled(size: str, rdma: bool | None, gbps: float) -> None:
    assert infiniband_gbps(size, rdma) == gbps
