"""Vast.ai's live offers from the marketplace search (``POST /bundles/``, the query as
the JSON body: what the official CLI sends since 2024, vast-ai/vast-python ``search
offers``).

Vast is a marketplace: each search result (an "ask") is one host's machine, with
``id`` (the ask to rent), ``gpu_name`` (``RTX 4090``), ``num_gpus``, ``gpu_ram`` and
``cpu_ram`` in MB, ``cpu_cores_effective``, ``dph_base`` (GPU + CPU, $/hour),
``dph_total`` ($/hour on-demand, *including* storage for the ``allocated_storage`` GB the
search names), ``storage_cost`` ($/GB/month), ``min_bid`` ($/hour interruptible, without
storage), ``geolocation`` (``Czechia, CZ``)
(https://docs.vast.ai/api-reference/search/search-offers). Storage bills from creation
until destroy, so every price here includes it for the disk a job gets: the search
sends ``allocated_storage`` (the job's ``disk_gb``, else ``storage_gb`` of the config,
default 100) and asks only for machines with that much disk. The search has a ``limit``
and an ``order`` but no cursor, so there is nothing to page: one call per market.

Many asks share a shape; an Offer is one shape (``<n>x-<GPU>-<cpus>-<ram MB>``, the
bundled snapshot's naming) at one location and market, priced by its cheapest ask, whose
id travels in ``extra["ask_id"]`` so create() rents exactly that machine. Interruptible
asks give spot offers at ``min_bid``. Must not invent a price: an ask without a positive
price gives no offer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer

SOURCE = "vast:bundles-search"
# Vast reports GPU memory as the card's usable MB (24564 for a 24 GB card): snap to the
# spec's size when within this fraction, as the bundled snapshot does.
SNAP = 0.08


def search_query(market: str, limit: int, storage_gb: float) -> dict[str, Any]:
    """The search body: rentable, unrented, verified machines with ``storage_gb`` of disk
    to spare, priced with that much storage, cheapest first."""
    return {
        "rentable": {"eq": True},
        "rented": {"eq": False},
        "verified": {"eq": True},
        "num_gpus": {"gte": 1},
        "disk_space": {"gte": storage_gb},
        "type": "bid" if market == "spot" else "on-demand",
        "order": [["dph_total", "asc"]],
        "limit": limit,
        "allocated_storage": storage_gb,
    }


def storage_per_hour(ask: Mapping[str, Any]) -> float:
    """What the ask's allocated storage costs per hour, as Vast itself priced it into
    dph_total (dph_total - dph_base); 0 when the ask does not say."""
    total, base = ask.get("dph_total"), ask.get("dph_base")
    if total is None or base is None:
        return 0.0
    return max(0.0, float(total) - float(base))


def ask_price(ask: Mapping[str, Any], market: str) -> float:
    """$/hour of renting ``ask`` with its allocated storage: dph_total on demand, the
    minimum bid plus the storage when interruptible; 0 when there is no price."""
    if market != "spot":
        return float(ask.get("dph_total") or 0)
    bid = float(ask.get("min_bid") or 0)
    return bid + storage_per_hour(ask) if bid > 0 else 0.0


def gpu_of(ask: Mapping[str, Any], registry: GpuRegistry) -> tuple[str, float, bool]:
    raw = str(ask.get("gpu_name") or "")
    memory = float(ask.get("gpu_ram") or 0) / 1024.0
    canon = registry.canonical(raw, memory or None)
    if canon:
        spec = registry.spec(canon)
        if spec and (not memory or abs(spec.memory_gb - memory) <= SNAP * spec.memory_gb):
            memory = spec.memory_gb
        return canon, round(memory, 1), True
    return raw, round(memory, 1), False


def shape_name(ask: Mapping[str, Any]) -> str:
    gpu = str(ask.get("gpu_name") or "").replace(" ", "_")
    cpus = int(float(ask.get("cpu_cores_effective") or 0))
    return f"{int(ask.get('num_gpus') or 0)}x-{gpu}-{cpus}-{int(float(ask.get('cpu_ram') or 0))}"


def place_name(text: object) -> str:
    """A Vast location as readers expect it: empty parts dropped (the market lists hosts
    with no city as ", US, NA"), "unknown" when nothing is left."""
    parts = [p.strip() for p in str(text or "").split(",")]
    return ", ".join(p for p in parts if p) or "unknown"


def offers_from_asks(
    asks: Iterable[Mapping[str, Any]],
    market: str,
    registry: GpuRegistry,
    *,
    observed_at: str,
    storage_gb: float,
) -> list[Offer]:
    best: dict[tuple[str, str], Offer] = {}
    for ask in asks:
        price = ask_price(ask, market)
        count = int(ask.get("num_gpus") or 0)
        if price <= 0 or count <= 0 or not ask.get("id"):
            continue
        gpu, memory, known = gpu_of(ask, registry)
        if memory <= 0:
            continue
        offer = Offer(
            provider="vast",
            instance_type=shape_name(ask),
            region=place_name(ask.get("geolocation")),
            zone="",
            market=market,
            gpu=gpu,
            gpu_count=count,
            gpu_memory_gb=memory,
            vcpus=float(ask.get("cpu_cores_effective") or 0) or 1.0,
            memory_gb=round(float(ask.get("cpu_ram") or 0) / 1024.0, 1) or 1.0,
            price_per_hour=round(price, 6),
            price_source=SOURCE,
            observed_at=observed_at,
            flags=() if known else (FLAG_UNKNOWN_GPU,),
            extra={
                "ask_id": int(ask["id"]),
                "machine_id": ask.get("machine_id"),
                "gpu_name": ask.get("gpu_name"),
                "storage_gb": storage_gb,
                "storage_per_hour": round(storage_per_hour(ask), 6),
            },
        )
        key = (offer.instance_type, offer.region)
        if key not in best or offer.price_per_hour < best[key].price_per_hour:
            best[key] = offer
    return sorted(best.values(), key=lambda o: (o.instance_type, o.region))


def country(place: str) -> str:
    """The country code of a Vast location: ``Quebec, CA`` (live) or ``Quebec, CA, NA``
    (the snapshot, which adds the continent) both give ``CA``."""
    parts = [p.strip() for p in place.split(",")]
    return parts[1] if len(parts) >= 2 else ""


def pick_ask(
    asks: Iterable[Mapping[str, Any]], offer: Offer, registry: GpuRegistry
) -> Mapping[str, Any] | None:
    """The cheapest ask matching a snapshot offer (one without an ask id): same GPU and
    count, in the same country when the offer names one (hosts come and go; the country
    is what a user picked the offer for)."""
    want = country(offer.region)
    fitting = [
        a
        for a in asks
        if int(a.get("num_gpus") or 0) == offer.gpu_count
        and gpu_of(a, registry)[0] == offer.gpu
        and (not want or country(str(a.get("geolocation") or "")) == want)
    ]
    priced = [a for a in fitting if ask_price(a, offer.market) > 0]
    return min(priced, key=lambda a: ask_price(a, offer.market), default=None)
