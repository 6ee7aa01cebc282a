"""Live refresh of AWS offers, through the real SDK: EC2 shapes, zones and spot prices
from moto's server; on-demand prices from a loopback replay of the Price List API
(moto has no `pricing` service), with paging, throttling and auth failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.aws.faults import map_error

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer
from cloudgpu.errors import AuthError, CapacityError, NotFoundError, QuotaError, TransientError
from cloudgpu.paths import Paths
from tests.backoff import jittered
from tests.providers.aws_fixtures.account import ec2_url, moto_url
from tests.providers.aws_fixtures.servers import load_products, pricing_replay, url_of
from tests.providers.aws_fixtures.setup import FAKE_ENV, make_provider

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest


def _provider(
    ec2_url: str, pricing_url: str, paths: Paths, home: Path, sleeps: list[float]
) -> AWSProvider:
    return make_provider(ec2_url, paths, str(home), sleeps, pricing_endpoint_url=pricing_url)


def _by_key(offers: list[Offer]) -> dict[tuple[str, str, str], Offer]:
    return {(o.instance_type, o.zone, o.market): o for o in offers}


@pytest.fixture(scope="module")
def refreshed(ec2_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Offer], object]:
    home = tmp_path_factory.mktemp("refresh")
    paths = Paths(home / "c", home / "d", home / "k").ensure()
    with pricing_replay(load_products(), page_size=3) as srv:
        offers = _provider(ec2_url, url_of(srv), paths, home, []).fetch_offers()
        return offers, srv


def test_on_demand_prices_come_from_the_price_list(refreshed: tuple[list[Offer], object]) -> None:
    offers, _ = refreshed
    by = _by_key(offers)
    g5 = by[("g5.xlarge", "use1-az6", "on_demand")]
    # Linux/Shared/NA/Used only: the Windows (1.19), SQL and reservation rows stay out.
    assert g5.price_per_hour == pytest.approx(1.006)
    assert by[("p4d.24xlarge", "use1-az6", "on_demand")].price_per_hour == pytest.approx(32.7726)
    assert g5.price_source == "aws:api" and g5.observed_at
    # A type without a Price List row gets no on-demand offer (no invented price).
    priced = {o.instance_type for o in offers if o.market == "on_demand"}
    assert priced <= {p["product"]["attributes"]["instanceType"] for p in load_products()}


def test_shapes_nvme_network_and_gpu_names(refreshed: tuple[list[Offer], object]) -> None:
    offers, _ = refreshed
    by = _by_key(offers)
    p4d = by[("p4d.24xlarge", "use1-az6", "on_demand")]
    assert (p4d.gpu_count, p4d.gpu_memory_gb, p4d.vcpus) == (8, 40.0, 96)
    assert (p4d.nvme_count, p4d.nvme_size_gb) == (8, 1000.0)
    assert p4d.network_gbps == 400.0
    gpus = load_registry()
    assert p4d.gpu == gpus.canonical("A100", 40.0)
    assert "80" not in p4d.gpu  # 40 GB A100 told apart from 80 GB by memory
    for o in offers:
        assert o.provider == "aws" and o.price_per_hour > 0 and o.gpu_count >= 1
        assert (FLAG_UNKNOWN_GPU in o.flags) == (gpus.canonical(o.gpu, o.gpu_memory_gb) is None)


def test_spot_offers_per_zone_from_spot_history(refreshed: tuple[list[Offer], object]) -> None:
    offers, _ = refreshed
    spot = [o for o in offers if o.market == "spot"]
    # Zones are AZ IDs, as in the bundled catalog (us-east-1a is use1-az6 on moto).
    assert spot and all(o.zone.startswith("use1-az") for o in spot)
    zones = {o.zone for o in spot if o.instance_type == "g5.xlarge"}
    assert len(zones) >= 2  # one offer per availability zone that offers the type


def test_price_list_is_read_page_by_page(refreshed: tuple[list[Offer], object]) -> None:
    _, srv = refreshed
    reqs = srv.requests  # type: ignore[attr-defined]
    assert len(reqs) >= 3
    assert [r["target"] for r in reqs] == ["AWSPriceListService.GetProducts"] * len(reqs)
    assert "NextToken" not in reqs[0]["body"] and all("NextToken" in r["body"] for r in reqs[1:])
    fields = {f["Field"]: f["Value"] for f in reqs[0]["body"]["Filters"]}
    assert fields["regionCode"] == "us-east-1" and fields["operatingSystem"] == "Linux"


def test_throttling_is_retried_with_backoff(ec2_url: str, paths: Paths, tmp_path: Path) -> None:
    sleeps: list[float] = []
    faults = [(429, "ThrottlingException"), (503, None)]
    with pricing_replay(load_products(), page_size=50, faults=faults) as srv:
        offers = _provider(ec2_url, url_of(srv), paths, tmp_path, sleeps).fetch_offers()
    assert any(o.market == "on_demand" for o in offers)
    assert jittered(sleeps, [0.5, 1.0])


def test_endless_throttling_ends_as_transient_error(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    sleeps: list[float] = []
    faults = [(429, "ThrottlingException")] * 10
    with pricing_replay(load_products(), faults=faults) as srv:
        prov = _provider(ec2_url, url_of(srv), paths, tmp_path, sleeps)
        with pytest.raises(TransientError, match="ThrottlingException"):
            prov.fetch_offers()
    assert len(sleeps) == prov.settings.max_attempts - 1


@pytest.mark.parametrize("kind", ["UnrecognizedClientException", "AccessDeniedException"])
def test_auth_failure_is_a_clear_auth_error(
    ec2_url: str, paths: Paths, tmp_path: Path, kind: str
) -> None:
    sleeps: list[float] = []
    with (
        pricing_replay(load_products(), faults=[(400, kind)]) as srv,
        pytest.raises(AuthError) as info,
    ):
        _provider(ec2_url, url_of(srv), paths, tmp_path, sleeps).fetch_offers()
    assert kind in str(info.value) and info.value.hint
    assert sleeps == []  # not retried
    assert FAKE_ENV["AWS_SECRET_ACCESS_KEY"] not in str(info.value)


def test_error_codes_map_to_the_project_tree() -> None:
    def err(code: str, status: int = 400) -> ClientError:
        return ClientError(
            {
                "Error": {"Code": code, "Message": "m"},
                "ResponseMetadata": {"HTTPStatusCode": status},
            },
            "RunInstances",
        )

    assert isinstance(map_error(err("InsufficientInstanceCapacity", 500), "x"), CapacityError)
    assert isinstance(map_error(err("SpotMaxPriceTooLow"), "x"), CapacityError)
    assert isinstance(map_error(err("MaxSpotInstanceCountExceeded"), "x"), CapacityError)
    assert isinstance(map_error(err("InstanceLimitExceeded"), "x"), CapacityError)
    assert isinstance(map_error(err("VcpuLimitExceeded"), "x"), QuotaError)
    for code in ("AuthFailure", "UnauthorizedOperation", "ExpiredToken"):
        assert isinstance(map_error(err(code, 403), "x"), AuthError)
    assert isinstance(map_error(err("InvalidInstanceID.NotFound"), "x"), NotFoundError)
    assert isinstance(map_error(err("RequestLimitExceeded", 503), "x"), TransientError)
