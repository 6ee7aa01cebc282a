"""The GPU spec registry and the cross-cloud offer catalog (public API re-exported here).

Reading the catalog never imports a provider plugin or a cloud SDK.
"""

from cloudgpu.catalog.catalog import (
    Catalog,
    SourceInfo,
    bundled_providers,
    cache_path,
    load_catalog,
    write_cache,
)
from cloudgpu.catalog.gpus import GpuRegistry, GpuSpec, load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.catalog.query import (
    Amount,
    OfferQuery,
    parse_amount,
    query_offers,
    rank,
    require_offers,
    run_query,
)

__all__ = [
    "Amount",
    "Catalog",
    "GpuRegistry",
    "GpuSpec",
    "Offer",
    "OfferQuery",
    "SourceInfo",
    "bundled_providers",
    "cache_path",
    "load_catalog",
    "load_registry",
    "parse_amount",
    "query_offers",
    "rank",
    "require_offers",
    "run_query",
    "write_cache",
]
