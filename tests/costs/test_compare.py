"""Rent options from offers, and the full comparison with its verdict."""

from __future__ import annotations

import json
import math

import pytest

from cloudgpu.costs.compare import analyse
from cloudgpu.costs.defaults import TcoInputs
from cloudgpu.costs.rent import effective_price, rent_options
from cloudgpu.costs.tco import hardware_for
from cloudgpu.errors import CatalogError
from tests.costs.helpers import REFERENCE_OFFERS, offer


def result(**values: float):  # type: ignore[no-untyped-def]
    inputs = TcoInputs().with_values(**values)
    hw = hardware_for("H100-SXM", 8, 30000.0, 700.0, inputs)
    return analyse(hw, inputs, rent_options(REFERENCE_OFFERS, "H100-SXM", 8, inputs))


def test_cheapest_per_provider_and_market() -> None:
    opts = rent_options(REFERENCE_OFFERS, "H100-SXM", 8, TcoInputs())
    got = [(o.provider, o.market, round(o.price_per_gpu_hour, 2)) for o in opts]
    assert got == [
        ("runpod", "spot", 2.69),
        ("aws", "spot", 3.10),
        ("runpod", "on_demand", 3.99),
        ("aws", "on_demand", 6.88),
        ("gcp", "on_demand", 10.98),
        ("azure", "on_demand", 12.29),
    ]


def test_committed_discount_adds_options() -> None:
    opts = rent_options(REFERENCE_OFFERS, "H100-SXM", 8, TcoInputs(commit_discount=0.3))
    committed = {o.provider: o.price_per_gpu_hour for o in opts if o.market == "committed"}
    assert committed["aws"] == pytest.approx(6.88 * 0.7)
    assert set(committed) == {"aws", "azure", "gcp", "runpod"}


def test_overheads_raise_effective_price() -> None:
    inputs = TcoInputs(idle_fraction=0.1, failed_fraction=0.05, storage_month=500)
    assert effective_price(2.0, inputs) == pytest.approx(2.0 / (0.9 * 0.95))
    opts = rent_options(REFERENCE_OFFERS, "H100-SXM", 8, inputs)
    assert all(o.fixed_per_year == 6000 for o in opts)
    with pytest.raises(CatalogError, match="useful"):
        effective_price(2.0, TcoInputs(idle_fraction=1.0))


def test_no_offers_names_nearest() -> None:
    with pytest.raises(CatalogError, match="no rent offers for 4x H100-SXM") as info:
        rent_options(REFERENCE_OFFERS, "H100-SXM", 4, TcoInputs())
    assert info.value.hint is not None and "1x H100-SXM from $2.79" in info.value.hint
    with pytest.raises(CatalogError) as info2:
        rent_options([], "H100-SXM", 8, TcoInputs())
    assert "catalog refresh" in (info2.value.hint or "")


def test_verdict_and_json() -> None:
    r = result(utilization=0.6)
    assert r.verdict().startswith("Renting on runpod (on-demand, $3.99/GPU-h) is cheaper below 53%")
    assert "at 60% owning costs $3.51/GPU-h, so buy." in r.verdict()
    assert "Spot on runpod (spot, $2.69/GPU-h) is cheaper still" in r.verdict()
    assert r.verdict().endswith("(owning beats it above 79%).")
    assert "so rent." in result(utilization=0.4).verdict()
    data = r.to_dict()
    assert data["owned_per_gpu_hour"] == pytest.approx(r.cost.per_gpu_hour(0.6), abs=1e-4)
    aws = next(
        o for o in data["rent_options"] if o["provider"] == "aws" and o["market"] == "on_demand"
    )
    assert aws["price_per_gpu_hour"] == 6.88
    assert aws["breakeven_utilization"] == pytest.approx(0.303, abs=0.001)
    assert aws["payback_months"] == pytest.approx(17.8, abs=0.1)
    azure = next(o for o in data["rent_options"] if o["provider"] == "azure")
    assert azure["breakeven_utilization"] < aws["breakeven_utilization"]
    text = json.dumps(data, allow_nan=False)  # raises on NaN/inf
    assert "NaN" not in text


def test_high_utilization_says_buy() -> None:
    assert "so buy." in result(utilization=0.9).verdict()


def test_zero_utilization_is_clean() -> None:
    r = result(utilization=0.0)
    data = r.to_dict()
    assert data["owned_per_gpu_hour"] is None
    assert all(o["payback_months"] is None for o in data["rent_options"])
    json.dumps(data, allow_nan=False)
    assert "nothing is used" in r.verdict()
    # The sensitivity grid never holds a NaN either.
    for s in data["sensitivity"]:
        for row in s["owned_per_gpu_hour"]:
            assert all(v is None or math.isfinite(v) for v in row)


def test_cheap_rent_never_breaks_even() -> None:
    inputs = TcoInputs()
    hw = hardware_for("H100-SXM", 8, 30000.0, 700.0, inputs)
    r = analyse(hw, inputs, rent_options([offer("cheap", 1.0)], "H100-SXM", 8, inputs))
    assert r.options[0].breakeven_utilization is None
    assert "at any utilization up to 100%" in r.verdict()


def test_cumulative_lines_span_horizon() -> None:
    r = result(utilization=0.6, years=3)
    lines = r.cumulative()
    assert set(lines) >= {"own", "aws on-demand", "runpod spot"}
    assert all(len(v) == 37 for v in lines.values())
    assert lines["own"][0] == pytest.approx(r.cost.capex)


def test_a_price_from_before_a_cut_is_used_only_when_nothing_newer_and_said_so() -> None:
    from dataclasses import replace

    from cloudgpu.catalog.offer import FLAG_PRICE_PREDATES_CUT
    from cloudgpu.costs import analyse, hardware_for, rent_options

    inputs = TcoInputs(utilization=0.6)
    hw = hardware_for("H100-SXM", 8, 30000.0, 700.0, inputs)
    old = replace(
        offer("aws", 12.29, instance_type="p5.48xlarge"), flags=(FLAG_PRICE_PREDATES_CUT,)
    )
    current = offer("aws", 6.88, instance_type="p5.48xlarge", region="us-west-2")
    pricier_current = replace(current, price_per_hour=13.0 * 8)
    # A current price wins over an older one, even when the older one is lower.
    cheap_old = replace(old, price_per_hour=5.0 * 8)
    (picked,) = rent_options([cheap_old, pricier_current], "H100-SXM", 8, inputs)
    assert picked.price_per_gpu_hour == 13.0 and not picked.flags
    # Only the old price known: used, and the verdict says what it rests on.
    result = analyse(hw, inputs, rent_options([old], "H100-SXM", 8, inputs))
    text = result.verdict()
    assert "aws on-demand's $12.29/GPU-h predates a published price cut" in text
    assert "`cloudgpu catalog refresh --provider aws`" in text
    assert "predates" not in result.verdict(caveats=False)
    result = analyse(hw, inputs, rent_options([current], "H100-SXM", 8, inputs))
    assert "predates" not in result.verdict()
