"""Catalog loading: bundled snapshots, the refresh cache replacing them, corrupt caches
falling back with a warning, staleness."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cloudgpu.catalog import snapshot
from cloudgpu.catalog.catalog import (
    bundled_providers,
    cache_path,
    is_stale,
    load_catalog,
    write_cache,
)
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import (
    FLAG_FREE_TIER,
    FLAG_GPU_COUNT_CORRECTED,
    FLAG_PRICE_PREDATES_CUT,
    FLAG_UNKNOWN_GPU,
)
from cloudgpu.errors import CatalogError
from cloudgpu.paths import Paths

from .helpers import offer

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_bundled_snapshot_covers_the_four_clouds_and_is_sane(paths: Paths) -> None:
    assert {"aws", "gcp", "azure", "runpod"} <= set(bundled_providers())
    cat = load_catalog(paths, now=NOW)
    reg = load_registry()
    assert len(cat.offers) > 5000
    for o in cat.offers:
        free = FLAG_FREE_TIER in o.flags  # Kaggle, Colab: $0 within a quota
        assert (o.price_per_hour > 0 or free) and o.gpu_count >= 1 and o.observed_at
        assert o.market in ("on_demand", "spot")
        assert reg.spec(o.gpu) is not None or FLAG_UNKNOWN_GPU in o.flags
    for name, info in cat.sources.items():
        assert not info.from_cache and not info.stale
        if name in ("kaggle", "colab"):  # checked against the vendors' docs, not SkyPilot
            assert "2026-12-01" in info.observed_at
            continue
        assert "skypilot-catalog" in info.source and "2026-12-01" in info.source


def test_bundled_snapshot_keeps_the_documented_corrections(paths: Paths) -> None:
    cat = load_catalog(paths, ["aws", "azure"], now=NOW)
    nd = [o for o in cat.offers if o.instance_type == "Standard_ND96isr_H100_v5"]
    assert nd and all(o.gpu_count == 8 and FLAG_GPU_COUNT_CORRECTED in o.flags for o in nd)
    p5 = [o for o in cat.offers if o.instance_type == "p5.48xlarge" and o.market == "on_demand"]
    assert p5 and all(FLAG_PRICE_PREDATES_CUT in o.flags for o in p5)
    assert all(o.nvme_count == 8 and o.nvme_size_gb == 3800 for o in p5)


def test_cache_replaces_the_providers_snapshot(paths: Paths) -> None:
    fresh = [offer(price_per_hour=42.0), offer(market="spot", price_per_hour=12.0)]
    write_cache(paths, "aws", fresh, "aws live refresh (test)", now=NOW - timedelta(hours=1))
    cat = load_catalog(paths, ["aws", "gcp"], now=NOW)
    aws = [o for o in cat.offers if o.provider == "aws"]
    assert [o.price_per_hour for o in aws] == [42.0, 12.0]
    assert cat.sources["aws"].from_cache and cat.sources["aws"].offer_count == 2
    assert cat.sources["aws"].source == "aws live refresh (test)"
    assert not cat.sources["gcp"].from_cache  # other providers keep their snapshot


def test_write_cache_stamps_missing_observation_time(paths: Paths) -> None:
    write_cache(paths, "aws", [offer(observed_at="")], "src", now=NOW)
    (loaded,) = snapshot.read(cache_path(paths, "aws")).offers
    assert loaded.observed_at == "2026-12-01T12:00:00Z"


def test_write_cache_refuses_empty_and_foreign_offers(paths: Paths) -> None:
    with pytest.raises(CatalogError, match="no offers"):
        write_cache(paths, "aws", [], "src")
    with pytest.raises(CatalogError, match="offers of gcp"):
        write_cache(paths, "aws", [offer(provider="gcp")], "src")
    assert not cache_path(paths, "aws").exists()


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated mid-write by another tool
        lambda text: "",  # empty file
        lambda text: "not json at all",
        lambda text: text.replace('"count": 1', '"count": 2'),  # rows missing
        lambda text: text.replace('"format": 1', '"format": 99'),
        lambda text: text.replace("42.0", '"cheap"'),  # wrong type in a row
        lambda text: text.replace("42.0", "-42.0"),  # an impossible (negative) price
        lambda text: text.replace("42.0", "NaN"),  # json.loads reads NaN
        lambda text: text.replace("42.0", "1e400"),  # infinity
        lambda text: text.replace('"p5.48xlarge"', "5"),  # a number where text is due
        lambda text: text.replace('"on_demand"', '"sometimes"'),  # no such market
        lambda text: text.replace(",8,", ',"8",', 1),  # gpu_count as text
        lambda text: text.replace('"origin": {}', '"origin": [1]'),  # header field type
        lambda text: text.replace('"skipped": {}', '"skipped": "x"'),
        lambda text: text.replace("[]]", "[3]]"),  # flags must be text
    ],
)
def test_corrupt_cache_warns_and_falls_back(paths: Paths, damage: object) -> None:
    write_cache(paths, "aws", [offer(price_per_hour=42.0)], "src", now=NOW)
    path = cache_path(paths, "aws")
    path.write_text(damage(path.read_text()))  # type: ignore[operator]
    warnings: list[str] = []
    cat = load_catalog(paths, ["aws"], now=NOW, warn=warnings.append)
    assert len(warnings) == 1 and str(path) in warnings[0]
    assert "using the bundled snapshot for aws" in warnings[0]
    assert not cat.sources["aws"].from_cache and len(cat.offers) > 1000


def test_write_cache_drops_impossible_offers(paths: Paths) -> None:
    write_cache(
        paths,
        "aws",
        [offer(price_per_hour=-1.0), offer(price_per_hour=float("nan")), offer()],
        "src",
        now=NOW,
    )
    data = snapshot.read(cache_path(paths, "aws"))
    assert [o.price_per_hour for o in data.offers] == [55.04]
    assert data.skipped == {"impossible values (negative price, NaN)": 2}


def test_corrupt_cache_warning_goes_to_stderr_by_default(
    paths: Paths, capsys: pytest.CaptureFixture[str]
) -> None:
    cache_path(paths, "gcp").parent.mkdir(parents=True, exist_ok=True)
    cache_path(paths, "gcp").write_text("{")
    load_catalog(paths, ["gcp"], now=NOW)
    assert capsys.readouterr().err.startswith("warning: ")


def test_cache_of_a_provider_without_snapshot_is_loaded(paths: Paths) -> None:
    write_cache(paths, "sim", [offer(provider="sim")], "sim refresh", now=NOW)
    cat = load_catalog(paths, now=NOW)
    assert "sim" in cat.sources and cat.sources["sim"].from_cache


def test_stale_offers_are_marked(paths: Paths) -> None:
    old = NOW - timedelta(days=45)
    write_cache(paths, "aws", [offer(observed_at="")], "src", now=old)
    cat = load_catalog(paths, ["aws"], now=NOW, stale_after_days=30)
    assert cat.sources["aws"].stale and cat.sources["aws"].age_days == pytest.approx(45)
    assert cat.is_stale(cat.offers[0])
    assert not load_catalog(paths, ["aws"], now=NOW, stale_after_days=60).sources["aws"].stale


def test_undated_prices_count_as_stale() -> None:
    assert is_stale("", NOW, 30)
    assert is_stale("garbage", NOW, 30)
    assert not is_stale("2026-12-01T00:00:00", NOW, 30)  # naive = UTC


def test_gpu_filter_reads_only_those_offers_but_counts_all(paths: Paths) -> None:
    full = load_catalog(paths, ["gcp"], now=NOW)
    some = load_catalog(paths, ["gcp"], now=NOW, gpus={"L4"})
    assert some.offers and {o.gpu for o in some.offers} == {"L4"}
    assert some.sources["gcp"].offer_count == full.sources["gcp"].offer_count
    assert some.total_offers() == len(full.offers)


def test_snapshot_round_trip_keeps_every_field(tmp_path: Path) -> None:
    o = offer(flags=("a", "b"), network_gbps=3200.0, zone="")
    data = snapshot.OfferFile("aws", "src", "2026-11-30T12:00:00Z", [o], price_source="test")
    path = tmp_path / "x.json"
    snapshot.write(path, data)
    back = snapshot.read(path)
    assert back.offers == [o] and back.total == 1


def test_unknown_provider_name_loads_nothing(paths: Paths) -> None:
    cat = load_catalog(paths, ["nope"], now=NOW)
    assert cat.offers == [] and cat.sources == {}
