"""The offers report: $/GPU-hour by GPU and provider (on-demand vs spot), and
performance per dollar, from offers already filtered by the caller.

Takes offers and the GPUs' dense BF16 TFLOPS as plain data; loads no catalog.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cloudgpu.catalog.offer import FLAG_STALE, PRICE_FLAG_TEXT, Offer
from cloudgpu.errors import CatalogError
from cloudgpu.reports.model import Chart, Column, Report, Table

MAX_OFFER_ROWS = 100
IsStale = Callable[[Offer], bool]


def price_flags(o: Offer | None, is_stale: IsStale | None = None) -> str:
    """What a reader must know about a price, in words (stale, above on-demand, ...)."""
    if o is None:
        return ""
    flags = [f for f in o.flags if f in PRICE_FLAG_TEXT]
    if is_stale is not None and is_stale(o):
        flags.insert(0, FLAG_STALE)
    return ", ".join(PRICE_FLAG_TEXT[f] for f in flags)


def source_and_date(offers: Iterable[Offer]) -> tuple[str, str]:
    """Distinct price sources, and the observed dates as a range."""
    sources, dates = set(), set()
    for o in offers:
        sources.add(o.price_source or f"{o.provider} (source not recorded)")
        if o.observed_at:
            dates.add(o.observed_at[:10])
    date = (
        "unknown"
        if not dates
        else (min(dates) if len(dates) == 1 else f"{min(dates)} to {max(dates)}")
    )
    return readable_sources(sources) or "no offers", date


# Where a bundled snapshot's rows come from, as a reader can look it up.
PUBLIC_SNAPSHOTS = {"skypilot-catalog": "github.com/skypilot-org/skypilot-catalog"}


def readable_sources(sources: Iterable[str]) -> str:
    """Price sources as a reader can follow them: ``snapshot:NAME@COMMIT`` strings
    become the public repository with its commits; live API sources stay as named."""
    snapshots: dict[str, list[str]] = {}
    others = []
    for text in sorted(set(sources)):
        kind, _, rest = text.partition(":")
        name, _, commit = rest.partition("@")
        if kind == "snapshot" and commit:
            snapshots.setdefault(name, []).append(commit)
        else:
            others.append(text)
    parts = [
        f"{PUBLIC_SNAPSHOTS.get(name, name)} (bundled snapshot; "
        f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits)})"
        for name, commits in sorted(snapshots.items())
    ]
    return "; ".join(parts + others)


def _cheapest(offers: Iterable[Offer], key: str) -> dict[tuple[str, ...], Offer]:
    best: dict[tuple[str, ...], Offer] = {}
    for o in offers:
        k = (o.gpu, o.provider, o.market) if key == "provider" else (o.gpu, o.market)
        if k not in best or o.price_per_gpu_hour < best[k].price_per_gpu_hour:
            best[k] = o
    return best


def price_table(offers: Sequence[Offer], is_stale: IsStale | None = None) -> Table:
    best = _cheapest(offers, "provider")
    pairs = sorted({(g, p) for g, p, _ in best})
    rows = []
    for gpu, provider in pairs:
        od, spot = best.get((gpu, provider, "on_demand")), best.get((gpu, provider, "spot"))
        rows.append(
            {
                "label": f"{gpu} · {provider}",
                "gpu": gpu,
                "provider": provider,
                "on_demand": od.price_per_gpu_hour if od else None,
                "on_demand_flags": price_flags(od, is_stale),
                "on_demand_type": od.instance_type if od else "",
                "spot": spot.price_per_gpu_hour if spot else None,
                "spot_flags": price_flags(spot, is_stale),
                "spot_type": spot.instance_type if spot else "",
                "spot_saving": (1 - spot.price_per_gpu_hour / od.price_per_gpu_hour)
                if od and spot and od.price_per_gpu_hour > 0
                else None,
            }
        )
    rows.sort(key=lambda r: (r["gpu"], r["on_demand"] if r["on_demand"] is not None else 1e9))
    cols = [  # "label" stays in the rows for the chart; GPU and provider say it here
        Column("gpu", "GPU"),
        Column("provider", "Provider"),
        Column("on_demand", "On-demand $/GPU-h", "usd"),
        Column("on_demand_flags", "On-demand price flags", attach=True),
        Column("on_demand_type", "On-demand instance"),
        Column("spot", "Spot $/GPU-h", "usd"),
        Column("spot_flags", "Spot price flags", attach=True),
        Column("spot_type", "Spot instance"),
        Column("spot_saving", "Spot saving", "pct"),
    ]
    return Table(
        "prices",
        "Cheapest $/GPU-hour by GPU and provider",
        cols,
        rows,
        note="Cheapest offer of each provider for each GPU, any region and count.",
    )


def value_table(offers: Sequence[Offer], bf16_tflops: Mapping[str, float]) -> Table:
    rows: list[dict[str, Any]] = []
    for (gpu, market), o in sorted(_cheapest(offers, "gpu").items()):
        tflops = bf16_tflops.get(gpu) or None
        rows.append(
            {
                "label": f"{gpu} ({o.provider}, {market.replace('_', '-')})",
                "gpu": gpu,
                "market": market,
                "provider": o.provider,
                "price_per_gpu_hour": o.price_per_gpu_hour,
                "bf16_tflops": tflops,
                "tflops_per_dollar": tflops / o.price_per_gpu_hour
                if tflops and o.price_per_gpu_hour > 0
                else None,
            }
        )
    rows.sort(key=lambda r: -float(r["tflops_per_dollar"] or 0.0))
    cols = [
        Column("gpu", "GPU"),
        Column("market", "Market"),
        Column("provider", "Provider"),
        Column("price_per_gpu_hour", "$/GPU-h", "usd"),
        Column("bf16_tflops", "Dense BF16 TFLOPS", "num"),
        Column("tflops_per_dollar", "TFLOPS per $/h", "num"),
    ]
    return Table(
        "value",
        "Performance per dollar",
        cols,
        rows,
        note="Dense BF16 TFLOPS per GPU from the GPU registry (datasheets); "
        "price of the cheapest offer of that GPU in that market.",
    )


def offers_table(offers: Sequence[Offer], is_stale: IsStale | None = None) -> Table:
    top = sorted(offers, key=lambda o: (o.price_per_gpu_hour, o.key))[:MAX_OFFER_ROWS]
    rows = [
        {
            "provider": o.provider,
            "instance_type": o.instance_type,
            "region": o.region,
            "zone": o.zone,  # the same type and price in three zones are three offers
            "market": o.market,
            "gpu": o.gpu,
            "gpu_count": o.gpu_count,
            "price_per_hour": o.price_per_hour,
            "price_per_gpu_hour": o.price_per_gpu_hour,
            "price_flags": price_flags(o, is_stale),
            "observed_at": o.observed_at[:10],
        }
        for o in top
    ]
    cols = [
        Column("provider", "Provider"),
        Column("instance_type", "Instance"),
        Column("region", "Region"),
        Column("zone", "Zone"),
        Column("market", "Market"),
        Column("gpu", "GPU"),
        Column("gpu_count", "GPUs", "int"),
        Column("price_per_hour", "$/h", "usd"),
        Column("price_per_gpu_hour", "$/GPU-h", "usd"),
        Column("price_flags", "Price flags", attach=True),
        Column("observed_at", "Observed"),
    ]
    note = f"{len(top)} cheapest of {len(offers)} matching offers by $/GPU-hour."
    return Table("offers", "Cheapest offers", cols, rows, note=note)


def _summary(offers: Sequence[Offer], prices: Table, filters: str) -> list[str]:
    gpus = len({o.gpu for o in offers})
    providers = len({o.provider for o in offers})
    lines = [f"{len(offers)} offers of {gpus} GPU models from {providers} providers{filters}."]
    on_demand = [r for r in prices.rows if r["on_demand"] is not None]
    if on_demand:
        best = min(on_demand, key=lambda r: float(r["on_demand"]))
        lines.append(
            f"Cheapest on-demand: {best['gpu']} on {best['provider']} at "
            f"${best['on_demand']:.2f}/GPU-h."
        )
    return lines


def offers_report(
    offers: Sequence[Offer],
    bf16_tflops: Mapping[str, float],
    generated_at: str,
    filters: str = "",
    is_stale: IsStale | None = None,
) -> Report:
    if not offers:
        raise CatalogError(
            "no offers to report", hint="loosen the filters or run `cloudgpu catalog refresh`"
        )
    source, date = source_and_date(offers)
    prices = price_table(offers, is_stale)
    summary = _summary(offers, prices, filters)
    charts = [
        Chart(
            "prices",
            "$/GPU-hour by GPU and provider",
            "bars",
            "prices",
            x="label",
            series=["on_demand", "spot"],
            x_title="Price (USD per GPU-hour)",
            y_title="GPU · provider",
            caption="Shorter is cheaper; spot can be reclaimed by the provider.",
        ),
        Chart(
            "value",
            "Performance per dollar",
            "scatter",
            "value",
            x="price_per_gpu_hour",
            y="bf16_tflops",
            group="market",
            label="label",
            x_title="Price (USD per GPU-hour)",
            y_title="Dense BF16 compute (TFLOPS per GPU)",
            caption="Up and to the left is more compute per dollar.",
        ),
    ]
    return Report(
        title="GPU offers: price and value",
        summary=summary,
        source=source,
        data_date=date,
        generated_at=generated_at,
        tables=[prices, value_table(offers, bf16_tflops), offers_table(offers, is_stale)],
        charts=charts,
        kind="offers",
    )
