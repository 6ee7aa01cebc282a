"""The sim provider's offers: by default a slice of real AWS offers, re-labelled "sim".

Prices and machine shapes come from the bundled catalog snapshot (cloudgpu.catalog), so
a plan against sim ranks like a plan against the real cloud. ``[providers.sim] offers``
replaces them with the user's own list (tests and demos use that for capacity and
failover scenarios). This module only builds Offer records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cloudgpu.catalog.catalog import load_catalog
from cloudgpu.catalog.offer import MARKETS, Offer
from cloudgpu.errors import ConfigError
from cloudgpu.paths import Paths
from cloudgpu.spec.fields import Node, choice, number, text

NAME = "sim"
# One small and one large machine of each common GPU family, both markets.
DEFAULT_TYPES = (
    "g4dn.xlarge",
    "g5.xlarge",
    "g6.xlarge",
    "g5.12xlarge",
    "g6e.12xlarge",
    "p4d.24xlarge",
    "p5.48xlarge",
)
DEFAULT_REGION = "us-east-1"
SIM_ZONE = "sim-a"

_REQUIRED = (
    "instance_type",
    "gpu",
    "gpu_count",
    "gpu_memory_gb",
    "vcpus",
    "memory_gb",
    "price_per_hour",
)
_OPTIONAL_NUM = ("nvme_count", "nvme_size_gb", "network_gbps")
_SIZE = number("a size or count", 0, 1e7, lo_open=False)
# One [[providers.sim.offers]] table, checked when config.toml is read.
OFFER_REQUIRED = _REQUIRED
OFFER_KEYS: dict[str, Node] = {
    "instance_type": text(max_len=200),
    "gpu": text(max_len=200),
    "gpu_count": number("GPUs", 0, 1024, integer=True, lo_open=False),
    "price_per_hour": number("USD per hour", 0, 10_000, lo_open=False),
    "region": text(max_len=200),
    "market": choice("on_demand | spot", MARKETS),
    **dict.fromkeys(("gpu_memory_gb", "vcpus", "memory_gb", *_OPTIONAL_NUM), _SIZE),
}


def default_offers(paths: Paths) -> list[Offer]:
    """The first zone of each DEFAULT_TYPES x market in DEFAULT_REGION, as sim offers."""
    catalog = load_catalog(paths, ["aws"], warn=None)
    chosen: dict[tuple[str, str], Offer] = {}
    for o in sorted(catalog.offers, key=lambda o: (o.instance_type, o.market, o.zone)):
        if o.instance_type in DEFAULT_TYPES and o.region == DEFAULT_REGION:
            chosen.setdefault((o.instance_type, o.market), o)
    return [
        Offer(
            NAME,
            o.instance_type,
            o.region,
            SIM_ZONE,
            o.market,
            o.gpu,
            o.gpu_count,
            o.gpu_memory_gb,
            o.vcpus,
            o.memory_gb,
            o.price_per_hour,
            o.nvme_count,
            o.nvme_size_gb,
            o.network_gbps,
            f"sim:{o.price_source}",
            o.observed_at,
            o.flags,
        )
        for o in chosen.values()
    ]


def configured_offers(items: Sequence[Any], observed_at: str) -> list[Offer]:
    """Offers from ``[[providers.sim.offers]]`` tables; errors name the bad key."""
    out = []
    for i, item in enumerate(items):
        where = f"providers.sim.offers[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}: expected a table with {', '.join(_REQUIRED)}")
        missing = [k for k in _REQUIRED if k not in item]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        market = str(item.get("market", "on_demand"))
        if market not in MARKETS:
            raise ConfigError(
                f"{where}.market: expected one of {', '.join(MARKETS)}, got {market!r}"
            )
        try:
            nums = {
                k: float(item[k]) for k in ("gpu_memory_gb", "vcpus", "memory_gb", "price_per_hour")
            }
            opt = {k: float(item.get(k, 0)) for k in _OPTIONAL_NUM}
            count = int(item["gpu_count"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: numbers expected for sizes and price ({exc})") from exc
        out.append(
            Offer(
                NAME,
                str(item["instance_type"]),
                str(item.get("region", DEFAULT_REGION)),
                SIM_ZONE,
                market,
                str(item["gpu"]),
                count,
                nums["gpu_memory_gb"],
                nums["vcpus"],
                nums["memory_gb"],
                nums["price_per_hour"],
                int(opt["nvme_count"]),
                opt["nvme_size_gb"],
                opt["network_gbps"],
                "sim:config",
                observed_at,
            )
        )
    return out
