"""The offer query engine: each filter, contradictions, sorts, cheapest-per, limits and
the empty-result explanation."""

from __future__ import annotations

import pytest

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.catalog.query import (
    Amount,
    OfferQuery,
    build_steps,
    gpu_names,
    parse_amount,
    parse_gpu,
    query_offers,
    rank,
    require_offers,
)
from cloudgpu.errors import CatalogError, ConfigError

from .helpers import offer

REG = load_registry()

OFFERS: list[Offer] = [
    offer(instance_type="p5.48xlarge", price_per_hour=55.04),
    offer(instance_type="p5.48xlarge", market="spot", price_per_hour=20.0, zone="use1-az2"),
    offer(
        provider="runpod", instance_type="1x_H100_SECURE", region="CA", zone="CA-MTL-1",
        gpu="H100-PCIe", gpu_count=1, vcpus=16, memory_gb=80, price_per_hour=2.39,
        nvme_count=0, nvme_size_gb=0,
    ),
    offer(
        provider="gcp", instance_type="a2-ultragpu-8g", region="europe-west4",
        zone="europe-west4-a", gpu="A100-80GB-SXM", gpu_count=8, vcpus=96, memory_gb=1360,
        price_per_hour=40.0, nvme_count=8, nvme_size_gb=375,
    ),
    offer(
        provider="azure", instance_type="Standard_NC24ads_A100_v4", region="eastus", zone="",
        gpu="A100-80GB-PCIe", gpu_count=1, vcpus=24, memory_gb=220, price_per_hour=3.67,
        nvme_count=1, nvme_size_gb=960,
    ),
    offer(
        provider="gcp", instance_type="g2-standard-4", region="us-central1",
        zone="us-central1-a", gpu="L4", gpu_count=1, gpu_memory_gb=24, vcpus=4, memory_gb=16,
        price_per_hour=0.71, nvme_count=0, nvme_size_gb=0,
    ),
    offer(
        provider="aws", instance_type="inf2.xlarge", gpu="Inferentia2", gpu_count=1,
        gpu_memory_gb=32, vcpus=4, memory_gb=16, price_per_hour=0.76, nvme_count=0,
    ),
]  # fmt: skip


def q(**kw: object) -> list[str]:
    return [o.instance_type for o in query_offers(OFFERS, OfferQuery(**kw), REG)]  # type: ignore[arg-type]


def test_default_is_every_gpu_offer_by_price() -> None:
    assert q() == [
        "g2-standard-4",
        "1x_H100_SECURE",
        "Standard_NC24ads_A100_v4",
        "p5.48xlarge",
        "a2-ultragpu-8g",
        "p5.48xlarge",
    ]


def test_non_gpu_accelerators_need_asking() -> None:
    assert "inf2.xlarge" in q(include_non_gpu=True)
    assert q(gpu="Inferentia2") == ["inf2.xlarge"]


def test_gpu_family_variant_alias_count_and_memory_floor() -> None:
    assert set(q(gpu="H100")) == {"p5.48xlarge", "1x_H100_SECURE"}
    assert q(gpu="H100-PCIe") == ["1x_H100_SECURE"]
    assert set(q(gpu="a100-80gb")) == {"Standard_NC24ads_A100_v4", "a2-ultragpu-8g"}
    assert q(gpu="A100-80GB:8") == ["a2-ultragpu-8g"]
    assert q(gpu="nvidia-h100-80gb:8", market="spot") == ["p5.48xlarge"]
    assert q(gpu="H100:2+") == ["p5.48xlarge", "p5.48xlarge"]
    assert q(gpu="48GB+") == q(min_gpu_memory=48)
    assert "g2-standard-4" not in q(gpu="48GB+")


def test_resource_filters() -> None:
    assert q(gpus=Amount(1)) == ["g2-standard-4", "1x_H100_SECURE", "Standard_NC24ads_A100_v4"]
    assert q(cpus=Amount(96, at_least=True)) == ["p5.48xlarge", "a2-ultragpu-8g", "p5.48xlarge"]
    assert q(memory=Amount(220)) == ["Standard_NC24ads_A100_v4"]
    assert q(nvme_gb=2000) == ["p5.48xlarge", "a2-ultragpu-8g", "p5.48xlarge"]
    assert q(providers=("gcp",)) == ["g2-standard-4", "a2-ultragpu-8g"]
    assert q(regions=("europe-*",)) == ["a2-ultragpu-8g"]
    assert q(regions=("use1-az2",)) == ["p5.48xlarge"]  # globs match zones too
    assert q(regions=("US-*",)) == ["g2-standard-4", "p5.48xlarge", "p5.48xlarge"]
    assert q(max_price=3) == ["g2-standard-4", "1x_H100_SECURE"]
    assert q(market="on_demand", gpu="H100-SXM") == ["p5.48xlarge"]


def test_sorts() -> None:
    assert q(sort="gpu-hour")[:3] == ["g2-standard-4", "1x_H100_SECURE", "p5.48xlarge"]
    # perf per dollar: H100 SXM spot at 20/8 per GPU (989 TF) beats A100-80GB SXM at 40/8
    perf = q(sort="perf-per-dollar")
    assert perf.index("p5.48xlarge") < perf.index("a2-ultragpu-8g")
    mem = q(sort="memory-per-dollar")
    # $/GB-hour: 24 GB at $0.71 (0.0296) < 80 GB at $2.39 (0.0299) < 640 GB at $20 (0.03125)
    assert mem[:3] == ["g2-standard-4", "1x_H100_SECURE", "p5.48xlarge"]
    with pytest.raises(ConfigError, match="--sort"):
        q(sort="cheapness")


def test_cheapest_per_and_limit() -> None:
    per_provider = query_offers(OFFERS, OfferQuery(cheapest_per="provider"), REG)
    assert [(o.provider, o.price_per_hour) for o in per_provider] == [
        ("gcp", 0.71),
        ("runpod", 2.39),
        ("azure", 3.67),
        ("aws", 20.0),
    ]
    per_gpu = query_offers(OFFERS, OfferQuery(cheapest_per="gpu", sort="gpu-hour"), REG)
    assert len(per_gpu) == len({o.gpu for o in per_gpu}) == 5
    assert q(limit=2) == ["g2-standard-4", "1x_H100_SECURE"]


def test_ranking_top_k_equals_full_sort() -> None:
    many = [offer(price_per_hour=float(p), zone=f"z{p}") for p in (5, 3, 9, 1, 7, 3, 2)]
    full = rank(many, "price", REG)
    assert rank(many, "price", REG, limit=3) == full[:3]
    assert [o.price_per_hour for o in full] == sorted(o.price_per_hour for o in many)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"gpu": "A100-80GB:8", "gpus": Amount(4)}, "--gpu asks for 8 GPUs but --gpus asks for 4"),
        ({"gpu": "L4", "min_gpu_memory": 48}, "contradicts --gpu L4"),
        ({"max_price": 0}, "--max-price 0"),
        ({"limit": 0}, "--limit 0"),
        ({"cheapest_per": "color"}, "--cheapest-per"),
        ({"gpu": "H100:0"}, "must be 1 to 999"),
    ],
)
def test_contradictory_filters_are_one_line_errors(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_steps(OfferQuery(**kw), REG)  # type: ignore[arg-type]
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unknown_gpu_names_closest() -> None:
    with pytest.raises(CatalogError) as err:
        q(gpu="A1000")
    assert err.value.hint and "A100" in err.value.hint


def test_empty_result_names_the_filter_that_removed_the_last() -> None:
    query = OfferQuery(gpu="H100", market="spot", max_price=10)
    with pytest.raises(CatalogError) as err:
        require_offers(OFFERS, query, REG)
    assert (
        str(err.value) == "no offers left: --max-price 10 removed the last 1 (of 7 in the catalog)"
    )
    with pytest.raises(CatalogError, match="--provider lambda removed the last 6"):
        require_offers(OFFERS, OfferQuery(providers=("lambda",)), REG)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", Amount(8)),
        ("8+", Amount(8, True)),
        ("128GB+", Amount(128, True)),
        ("1.5", Amount(1.5)),
    ],
)
def test_parse_amount(text: str, expected: Amount) -> None:
    assert parse_amount(text, "--x") == expected


def test_parse_amount_rejects_words() -> None:
    with pytest.raises(ConfigError, match="--cpus: 'lots' is not a number"):
        parse_amount("lots", "--cpus")


def test_parse_gpu_forms() -> None:
    assert parse_gpu("24GB+").min_memory_gb == 24
    spec = parse_gpu("A100-80GB:8")
    assert gpu_names("A100-80GB:8", REG) == {"A100-80GB-SXM", "A100-80GB-PCIe"}
    assert spec.count == 8 and not spec.count_at_least
    assert parse_gpu("H100:4+").count_at_least
    assert gpu_names("rtx 4090", REG) == {"RTX4090"}


def test_fractional_gpu_pays_per_pflop_for_its_share_only() -> None:
    from cloudgpu.catalog.offer import FLAG_FRACTIONAL_GPU, Offer

    eighth = Offer(
        provider="azure", instance_type="Standard_NV4as_v4", region="r", zone="",
        market="on_demand", gpu="MI25", gpu_count=1, gpu_memory_gb=2.0, vcpus=4,
        memory_gb=14, price_per_hour=0.1, flags=(FLAG_FRACTIONAL_GPU,),
    )  # fmt: skip
    whole = Offer(**{**eighth.to_dict(), "gpu_memory_gb": 16.0, "flags": ()})
    assert eighth.gpu_share(16.0) == 0.125 and whole.gpu_share(16.0) == 1.0
    per_whole = whole.price_per_pflop_hour(100.0, 16.0)
    assert per_whole is not None
    assert eighth.price_per_pflop_hour(100.0, 16.0) == pytest.approx(8 * per_whole)
