"""On-demand Linux prices from the AWS Price List Query API (``pricing:GetProducts``).

Each PriceList entry is a JSON *string* holding one product: ``product.attributes``
(instanceType, regionCode, operatingSystem, tenancy, ...) and ``terms.OnDemand.<offer
term>.priceDimensions.<rate code>.pricePerUnit.USD`` with ``unit`` "Hrs"
(https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html,
https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-service-price-list-file-for-services.html).
This module turns those pages into {instance type: USD per hour}; it does not build
offers and never calls EC2.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cloudgpu_providers.aws.faults import Caller

# The one price a Linux on-demand instance has: shared tenancy, no pre-installed
# software (SQL Server etc.), "Used" capacity (not reservation placeholders).
LINUX_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "licenseModel": "No License required",
}


def _hourly_usd(product: dict[str, Any]) -> float | None:
    """The hourly USD price of one product's OnDemand term, None when it has none."""
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if dim.get("unit") != "Hrs":
                continue
            try:
                price = float(dim.get("pricePerUnit", {}).get("USD", ""))
            except ValueError:
                continue
            if price > 0:
                return price
    return None


def parse_price_list(price_list: Iterable[str], wanted: set[str]) -> dict[str, float]:
    """{instance type: hourly USD} for the wanted types in one page's PriceList."""
    out: dict[str, float] = {}
    for raw in price_list:
        try:
            product = json.loads(raw)
        except (TypeError, ValueError):
            continue  # one unreadable entry must not lose the rest of the page
        attrs = product.get("product", {}).get("attributes", {})
        itype = attrs.get("instanceType")
        if itype not in wanted:
            continue
        price = _hourly_usd(product)
        if price is not None:
            out[itype] = price
    return out


def on_demand_prices(
    call: Caller, pricing: Any, region: str, instance_types: set[str]
) -> dict[str, float]:
    """Hourly on-demand Linux prices in ``region`` for ``instance_types``, all pages."""
    filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
    filters += [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in LINUX_FILTERS.items()]
    prices: dict[str, float] = {}
    pages = call.pages(
        f"pricing get_products ({region})",
        pricing.get_products,
        "NextToken",
        ServiceCode="AmazonEC2",
        Filters=filters,
        FormatVersion="aws_v1",
        MaxResults=100,
    )
    for page in pages:
        prices.update(parse_price_list(page.get("PriceList", []), instance_types))
    return prices
