"""GCP offers through the real Compute and Cloud Billing SDKs against the loopback
server: machine types and GPU SKUs summed into prices, per family and market, never a
guessed price, the listing retried when throttled."""

from __future__ import annotations

import pytest
from cloudgpu_providers.gcp import GCPProvider, pricing

from cloudgpu.catalog.offer import Offer
from tests.backoff import jittered
from tests.fixtures.gcp.server import FakeGCP
from tests.providers.gcp_kit import by_key, fake, offer, offers, provider

__all__ = ["fake", "offer", "offers", "provider"]  # the fixtures, imported for pytest


SKU = {  # unit prices in tests/fixtures/gcp/skus_list.json
    "a2_core": 0.031611,
    "a2_ram": 0.004237,
    "a100": 2.933908,
    "a2_core_spot": 0.009483,
    "a2_ram_spot": 0.001271,
    "a100_spot": 1.1,
    "n1_core": 0.031611,
    "n1_ram": 0.004237,
    "t4": 0.35,
    "g2_core": 0.024988,
    "g2_ram": 0.002927,
    "l4": 0.560347,
}


def test_offers_sum_core_ram_and_gpu_skus(offers: list[Offer]) -> None:
    table = by_key(offers)
    a2 = table[("a2-highgpu-1g", "us-central1-a", "on_demand")]
    assert a2.gpu == "A100-40GB-SXM" and a2.gpu_count == 1 and a2.gpu_memory_gb == 40
    assert a2.vcpus == 12 and a2.memory_gb == 85
    assert a2.price_per_hour == pytest.approx(
        12 * SKU["a2_core"] + 85 * SKU["a2_ram"] + SKU["a100"]
    )
    spot = table[("a2-highgpu-1g", "us-central1-a", "spot")]
    expected = 12 * SKU["a2_core_spot"] + 85 * SKU["a2_ram_spot"] + SKU["a100_spot"]
    assert spot.price_per_hour == pytest.approx(expected)
    # The second page of machine types and of SKUs was read (G2 + L4 live there).
    g2 = table[("g2-standard-8", "us-central1-c", "on_demand")]
    assert g2.gpu == "L4"
    assert g2.price_per_hour == pytest.approx(8 * SKU["g2_core"] + 32 * SKU["g2_ram"] + SKU["l4"])
    assert all(o.region == o.zone.rsplit("-", 1)[0] and o.observed_at for o in offers)


def test_attached_gpus_get_a_documented_n1_host(offers: list[Offer]) -> None:
    table = by_key(offers)
    t4x2 = table[("n1-standard-8+2xnvidia-tesla-t4", "us-central1-a", "on_demand")]
    assert t4x2.gpu == "T4" and t4x2.gpu_count == 2 and t4x2.vcpus == 8
    assert t4x2.price_per_hour == pytest.approx(
        8 * SKU["n1_core"] + 30 * SKU["n1_ram"] + 2 * SKU["t4"]
    )
    assert ("n1-standard-4+1xnvidia-tesla-t4", "us-central1-a", "on_demand") in table
    # The Virtual Workstation variant is not a separate GPU.
    assert not any("vws" in o.instance_type for o in offers)


def test_missing_prices_are_not_guessed(offers: list[Offer]) -> None:
    # GB200 (a4x) has no public SKU and H200 no Spot SKU: no offer rather than an invented one.
    assert not any(o.instance_type.startswith("a4x-") for o in offers)
    assert not any(o.gpu == "H200-SXM" and o.market == "spot" for o in offers)
    # Sole-tenant, DWS, workstation and commitment SKUs price nothing.
    t4 = by_key(offers)[("n1-standard-4+1xnvidia-tesla-t4", "us-central1-a", "on_demand")]
    assert t4.price_per_hour == pytest.approx(4 * SKU["n1_core"] + 15 * SKU["n1_ram"] + SKU["t4"])


# What each GPU family GCP sells is offered as, from the real SKU wording in the fixture:
# (instance type, zone) -> markets. H200 has no Spot SKU; GB200 no SKU at all.


FAMILIES = {
    ("n1-standard-4+1xnvidia-tesla-t4", "us-central1-a"): ("T4", {"on_demand", "spot"}),
    ("n1-standard-4+1xnvidia-tesla-v100", "us-central1-a"): ("V100-16GB", {"on_demand", "spot"}),
    ("n1-standard-4+1xnvidia-tesla-p100", "us-central1-a"): ("P100", {"on_demand", "spot"}),
    ("n1-standard-4+1xnvidia-tesla-p4", "us-central1-a"): ("P4", {"on_demand", "spot"}),
    ("a2-highgpu-1g", "us-central1-a"): ("A100-40GB-SXM", {"on_demand", "spot"}),
    ("a2-ultragpu-1g", "us-central1-a"): ("A100-80GB-SXM", {"on_demand", "spot"}),
    ("g2-standard-8", "us-central1-c"): ("L4", {"on_demand", "spot"}),
    ("a3-highgpu-8g", "us-central1-c"): ("H100-SXM", {"on_demand", "spot"}),
    ("a3-megagpu-8g", "us-central1-c"): ("H100-SXM", {"on_demand", "spot"}),
    ("a3-ultragpu-8g", "us-central1-c"): ("H200-SXM", {"on_demand"}),
    ("a4-highgpu-8g", "us-central1-c"): ("B200", {"on_demand", "spot"}),
    ("g4-standard-48", "europe-west1-b"): ("nvidia-rtx-pro-6000", {"on_demand", "spot"}),
}


def test_every_gpu_family_is_offered_from_real_sku_names(offers: list[Offer]) -> None:
    found: dict[tuple[str, str], tuple[str, set[str]]] = {}
    for o in offers:
        gpu, markets = found.setdefault((o.instance_type, o.zone), (o.gpu, set()))
        assert gpu == o.gpu
        markets.add(o.market)
    for key, want in FAMILIES.items():
        assert found.get(key) == want, key


def test_spot_gpu_skus_attached_to_spot_vms_price_spot_offers(offers: list[Offer]) -> None:
    """'Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas' is the L4's
    Spot price; with 'Spot Preemptible G2 Instance Core/Ram' it makes the Spot offer."""
    g2 = by_key(offers)[("g2-standard-8", "us-central1-c", "spot")]
    assert g2.price_per_hour == pytest.approx(8 * 0.009995 + 32 * 0.001171 + 0.3192)


def test_family_specific_prices(offers: list[Offer]) -> None:
    table = by_key(offers)
    # a3-megagpu is priced with the A3Plus core/RAM SKUs and the Mega GPU SKU.
    mega = table[("a3-megagpu-8g", "us-central1-c", "on_demand")]
    assert mega.price_per_hour == pytest.approx(208 * 0.026924 + 1872 * 0.002344 + 8 * 11.7)
    high = table[("a3-highgpu-8g", "us-central1-c", "spot")]
    assert high.price_per_hour == pytest.approx(208 * 0.012888 + 1872 * 0.001127 + 8 * 4.424)
    assert high.nvme_count == 16 and high.nvme_size_gb == 375
    # A4 has no core/RAM SKUs: the "(1 gpu slice)" price is the whole VM per GPU.
    a4 = table[("a4-highgpu-8g", "us-central1-c", "spot")]
    assert a4.price_per_hour == pytest.approx(8 * 4.9542)
    # G4's GPU SKU is "RTX 6000 96GB", the accelerator nvidia-rtx-pro-6000 (96 GB).
    g4 = table[("g4-standard-48", "europe-west1-b", "on_demand")]
    assert g4.price_per_hour == pytest.approx(48 * 0.04891 + 180 * 0.005744 + 4.5)
    assert g4.gpu_memory_gb == 96 and g4.region == "europe-west1"


def test_spot_wording_wins_over_the_usage_type() -> None:
    """A crawler of the live catalog saw a Spot B200 slice SKU filed under OnDemand: the
    description decides, so it never becomes (or replaces) the on-demand price."""
    skus = [
        pricing.Sku(
            "Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas",
            "OnDemand",
            ("us-central1",),
            4.95,
            "GPU",
        ),
        pricing.Sku(
            "A4 Nvidia B200 (1 gpu slice) running in Americas",
            "OnDemand",
            ("us-central1",),
            16.11,
            "GPU",
        ),
        pricing.Sku(
            "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
            "Preemptible",
            ("us-central1",),
            0.2,
            "GPU",
        ),
        pricing.Sku(
            "Nvidia Tesla T4 GPU running in Americas", "Commit1Yr", ("us-central1",), 0.22, "GPU"
        ),
    ]
    table = pricing.price_table(skus)
    assert table.get("slice", "b200", "us-central1", "spot") == 4.95
    assert table.get("slice", "b200", "us-central1", "on_demand") == 16.11
    assert table.get("gpu", "t4", "us-central1", "spot") == 0.2
    assert table.get("gpu", "t4", "us-central1", "on_demand") is None


def test_throttled_listing_is_retried_with_backoff(provider: GCPProvider, fake: FakeGCP) -> None:
    fake.fail_next = [
        ("GET", "aggregated/machineTypes", "error_rate_limited"),
        ("GET", "/v1/services/", "error_backend"),
    ]
    assert provider.fetch_offers()
    assert jittered(provider.sleeps, [1.0, 1.0])  # type: ignore[attr-defined]
