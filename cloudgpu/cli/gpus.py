"""`cloudgpu gpus`: the GPU spec table with the cheapest $/GPU-hour of each GPU.

Thin: reads the spec registry and the catalog (files only), computes per GPU the
cheapest on-demand and spot price per GPU-hour across providers, prints one format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click

from cloudgpu.catalog.gpus import GpuRegistry, GpuSpec, load_registry
from cloudgpu.catalog.offer import (
    FLAG_FRACTIONAL_GPU,
    FLAG_FREE_TIER,
    FLAG_SPOT_ABOVE_ON_DEMAND,
    FLAG_UNKNOWN_GPU,
    Offer,
)
from cloudgpu.catalog.present import SPEC_COLUMNS, render, spec_record
from cloudgpu.cli import measured
from cloudgpu.cli.context import get_app
from cloudgpu.cli.offers import load_for, output_format, split_list
from cloudgpu.texttable import terminal_width

# gpu -> market -> (price per GPU-hour, provider, stale)
Cheapest = dict[str, dict[str, tuple[float, str, bool]]]


def _never_stale(offer: Offer) -> bool:
    return False


def cheapest_per_gpu(
    offers: Iterable[Offer], is_stale: Callable[[Offer], bool] = _never_stale
) -> Cheapest:
    """Lowest $/GPU-hour per GPU and market; flagged-odd prices do not count as cheapest
    (an unknown GPU has no row; a spot price above on-demand is no real spot price; a
    share of one GPU is not a GPU-hour)."""
    skip = {FLAG_UNKNOWN_GPU, FLAG_SPOT_ABOVE_ON_DEMAND, FLAG_FRACTIONAL_GPU, FLAG_FREE_TIER}
    best: Cheapest = {}
    for o in offers:
        if skip.intersection(o.flags):
            continue
        per_market = best.setdefault(o.gpu, {})
        price = o.price_per_gpu_hour
        cur = per_market.get(o.market)
        if cur is None or price < cur[0]:
            per_market[o.market] = (price, o.provider, is_stale(o))
    return best


def free_tiers(offers: Iterable[Offer]) -> dict[str, list[str]]:
    """GPU -> providers that offer it in a free tier (a quota, not a price)."""
    out: dict[str, set[str]] = {}
    for o in offers:
        if FLAG_FREE_TIER in o.flags:
            out.setdefault(o.gpu, set()).add(o.provider)
    return {gpu: sorted(p) for gpu, p in out.items()}


def select_specs(registry: GpuRegistry, names: tuple[str, ...], include_all: bool) -> list[GpuSpec]:
    if names:
        wanted = set().union(*(registry.matches(n) for n in names))
        return [s for s in registry.all() if s.name in wanted]
    return [s for s in registry.all() if include_all or s.is_gpu]


@click.command("gpus")
@click.argument("names", nargs=-1)
@click.option("--provider", multiple=True, help="Prices from these providers only.")
@click.option("--priced", is_flag=True, help="Only GPUs that some provider offers.")
@click.option("--free", is_flag=True, help="Only GPUs that a free tier offers (Kaggle, Colab).")
@click.option("--all-accelerators", is_flag=True, help="Include TPUs, Inferentia, FPGAs...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@click.option("--markdown", "as_md", is_flag=True, help="Print a Markdown table.")
def gpus(names: tuple[str, ...], **opts: Any) -> None:
    """GPU specs (memory, bandwidth, dense BF16/FP8/FP32 TFLOPS, link, TDP, purchase
    price) with the cheapest on-demand and spot $/GPU-hour across providers.

    NAMES filter by family or model (e.g. `cloudgpu gpus H100 A100-80GB`).
    """
    fmt = output_format(opts["as_json"], opts["as_csv"], opts["as_md"])
    registry = load_registry()
    specs = select_specs(registry, names, opts["all_accelerators"])
    catalog = load_for(get_app(), split_list(opts["provider"]), None)
    cheapest = cheapest_per_gpu(catalog.offers, catalog.is_stale)
    free = free_tiers(catalog.offers)
    records = [spec_record(s, cheapest.get(s.name, {}), free.get(s.name, ())) for s in specs]
    if opts["priced"]:
        records = [r for r in records if _priced(r) or r["free_tier"]]
    if opts["free"]:
        records = [r for r in records if r["free_tier"]]
    records.sort(key=lambda r: (r["vendor"], r["family"], -r["memory_gb"], r["name"]))
    columns = measured.gpus(get_app(), records, SPEC_COLUMNS)
    click.echo(render(records, fmt, columns, width=terminal_width()))


def _priced(record: dict[str, Any]) -> bool:
    return (
        record["cheapest_on_demand_gpu_hour"] is not None
        or record["cheapest_spot_gpu_hour"] is not None
    )
