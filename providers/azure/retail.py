"""Azure's public Retail Prices API (no auth) turned into cloudgpu Offers.

API: https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices
Each page is ``{"BillingCurrency", "CustomerEntityId", "Items": [...], "NextPageLink",
"Count"}``; ``NextPageLink`` is the full URL of the next page, null on the last one.

What is kept, on purpose: Linux pay-as-you-go rows (``priceType eq 'Consumption'``) of
the GPU families NC/ND/NV, priced in USD per hour, primary meter region only. Rows whose
meterName contains ``Spot`` are the spot market. ``Low Priority`` rows (the retired batch
market) and ``Windows`` rows (licence included) are skipped. This module talks HTTP with
the standard library only (through cloudgpu.httpjson) and must not import the Azure
SDK.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cloudgpu_providers.azure.sizes import GPU_FAMILY, SizeSpec

from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer
from cloudgpu.errors import AuthError, ProviderError, TransientError
from cloudgpu.httpjson import JsonHttpClient

DEFAULT_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
FILTER = " and ".join(
    (
        "serviceName eq 'Virtual Machines'",
        "priceType eq 'Consumption'",
        "contains(armSkuName, 'Standard_N')",
        "contains(productName, 'Windows') eq false",
        "contains(meterName, 'Low Priority') eq false",
    )
)
PRICE_SOURCE = "azure:retail-prices-api"
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})

# Turns (raw GPU model, memory per GPU) into the catalog's canonical name, None if unknown.
Canonicalize = Callable[[str, float], str | None]


@dataclass
class RetailClient:
    """Reads every page of one Retail Prices query, retrying throttling with backoff."""

    base_url: str
    sleep: Callable[[float], None]
    retries: int = 5
    timeout_s: float = 60.0

    def first_url(self) -> str:
        query = urllib.parse.urlencode({"api-version": API_VERSION, "$filter": FILTER})
        return f"{self.base_url}?{query}"

    def items(self) -> Iterator[dict[str, Any]]:
        http = JsonHttpClient(
            self.base_url,
            self.sleep,
            map_status=_http_error,
            unreachable=_unreachable,
            provider="azure",
            retry_statuses=_RETRY_STATUS,
            attempts=self.retries + 1,
            retry_after_cap_s=None,  # the public price API's own Retry-After is trusted
            timeout_s=self.timeout_s,
        )
        url: str | None = self.first_url()
        while url:
            page = http.request("GET", "", _page, url=url)
            yield from page.get("Items") or []
            url = page.get("NextPageLink") or None


def _page(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8"))
    except ValueError:  # a broken page is not retried: the next read would be the same
        raise ProviderError("retail prices API sent invalid JSON", provider="azure") from None
    if not isinstance(body, dict):
        raise ProviderError("retail prices page is not a JSON object", provider="azure")
    return body


def _unreachable(exc: OSError) -> ProviderError:
    return TransientError(f"retail prices API unreachable: {exc}", provider="azure")


def _http_error(status: int, raw: bytes) -> ProviderError:
    if status in (401, 403):
        return AuthError(f"retail prices API refused the request (HTTP {status})", provider="azure")
    if status in _RETRY_STATUS:
        return TransientError(
            f"retail prices API still failing after retries (HTTP {status})", provider="azure"
        )
    return ProviderError(f"retail prices API answered HTTP {status}", provider="azure")


def is_wanted(item: Mapping[str, Any]) -> bool:
    """A Linux pay-as-you-go hourly USD row of a GPU family; see the module docstring."""
    sku = str(item.get("armSkuName") or "")
    meter = str(item.get("meterName") or "")
    product = str(item.get("productName") or "")
    return (
        bool(GPU_FAMILY.match(sku))
        and item.get("type", "Consumption") == "Consumption"
        and item.get("currencyCode", "USD") == "USD"
        and str(item.get("unitOfMeasure", "1 Hour")) == "1 Hour"
        and "Low Priority" not in meter
        # api-version 2023-01-01-preview also returns non-primary meter regions: duplicates.
        and item.get("isPrimaryMeterRegion", True) is not False
        and "Windows" not in product
        and float(item.get("retailPrice") or 0) > 0
    )


def market_of(item: Mapping[str, Any]) -> str:
    return "spot" if "Spot" in str(item.get("meterName") or "") else "on_demand"


def build_offers(
    items: Iterator[dict[str, Any]],
    sizes: Mapping[str, SizeSpec],
    canonical: Canonicalize,
    observed_at: str | None = None,
    restricted: Set[tuple[str, str]] = frozenset(),
) -> tuple[list[Offer], list[str]]:
    """Offers from retail rows joined with size specs; also the GPU sizes with no spec.

    When a row repeats (same size, region and market), the one with the latest
    effectiveStartDate wins: older rows are superseded prices. ``restricted`` holds
    (lower-cased size, region) pairs the subscription may not use; they are left out.
    """
    observed = observed_at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in items:
        if not is_wanted(item):
            continue
        key = (str(item["armSkuName"]).lower(), str(item.get("armRegionName")), market_of(item))
        if key[:2] in restricted:
            continue
        old = best.get(key)
        if old is None or str(item.get("effectiveStartDate", "")) > str(
            old.get("effectiveStartDate", "")
        ):
            best[key] = item
    offers: list[Offer] = []
    missing: set[str] = set()
    for (sku, region, market), item in sorted(best.items()):
        spec = sizes.get(sku)
        if spec is None:
            missing.add(str(item["armSkuName"]))
            continue
        offers.append(_offer(spec, region, market, item, canonical, observed))
    return offers, sorted(missing)


def _offer(
    spec: SizeSpec,
    region: str,
    market: str,
    item: Mapping[str, Any],
    canonical: Canonicalize,
    observed: str,
) -> Offer:
    # The size name decides first (it tells SXM from PCIe); the docs' model name second.
    name = canonical(spec.name, spec.gpu_memory_gb) or canonical(spec.gpu_model, spec.gpu_memory_gb)
    return Offer(
        provider="azure",
        instance_type=spec.name,
        region=region,
        zone="",
        market=market,
        gpu=name or spec.gpu_model,
        gpu_count=spec.gpu_count,
        gpu_memory_gb=spec.gpu_memory_gb,
        vcpus=spec.vcpus,
        memory_gb=spec.memory_gb,
        price_per_hour=float(item["retailPrice"]),
        nvme_count=spec.nvme_count,
        nvme_size_gb=spec.nvme_size_gb,
        # The planner's interconnect model reads this as the node-to-node bandwidth;
        # only on-demand nodes are put where the fabric connects them (nodes.py).
        network_gbps=spec.infiniband_gbps if market == "on_demand" else 0.0,
        price_source=PRICE_SOURCE,
        observed_at=observed,
        flags=() if name else (FLAG_UNKNOWN_GPU,),
        extra={"meter_id": item.get("meterId", ""), "location": item.get("location", "")},
    )
