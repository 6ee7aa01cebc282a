"""Offers and specs as records, and records as text: table, Markdown, CSV or JSON.

Every format is rendered from the same list of records, so `--json`, `--csv`,
`--markdown` and the table always show the same rows. JSON and CSV carry the full
records (machine-readable keys documented in the README); the table and Markdown show a
chosen subset of columns. No I/O: callers print the returned string.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cloudgpu.catalog.catalog import Catalog
from cloudgpu.catalog.gpus import GpuRegistry, GpuSpec
from cloudgpu.catalog.offer import Offer
from cloudgpu.texttable import render_table

FORMATS = ("table", "json", "csv", "markdown")

# Short notes for flags in the table's NOTE column (JSON/CSV carry the full flag names).
FLAG_NOTES = {
    "stale": "stale",
    "unknown_gpu": "unknown-gpu",
    "spot_above_on_demand": "spot>od",
    "price_predates_cut": "pre-2025-cut",
    "gpu_count_corrected": "count-fixed",
    "gpu_memory_corrected": "mem-fixed",
    "fractional_gpu": "partial-gpu",
}


def _r(x: float | None, nd: int = 4) -> float | None:
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return round(x, nd)


OFFER_KEYS: tuple[str, ...] = (
    "provider", "instance_type", "region", "zone", "market", "gpu", "gpu_count",
    "gpu_memory_gb", "vcpus", "memory_gb", "nvme_gb", "nvme_count", "nvme_size_gb",
    "network_gbps", "price_per_hour", "price_per_gpu_hour", "price_per_pflop_hour",
    "price_per_gb_hour", "price_source", "observed_at", "stale", "flags",
)  # fmt: skip


def offer_record(offer: Offer, catalog: Catalog, registry: GpuRegistry) -> dict[str, Any]:
    """The JSON object of one offer (keys are a public interface: add, never rename)."""
    spec = registry.spec(offer.gpu)
    stale = catalog.is_stale(offer)
    flags = list(offer.flags) + (["stale"] if stale else [])
    return {
        "provider": offer.provider,
        "instance_type": offer.instance_type,
        "region": offer.region,
        "zone": offer.zone,
        "market": offer.market,
        "gpu": offer.gpu,
        "gpu_count": offer.gpu_count,
        "gpu_memory_gb": offer.gpu_memory_gb,
        "vcpus": offer.vcpus,
        "memory_gb": offer.memory_gb,
        "nvme_gb": offer.nvme_gb,
        "nvme_count": offer.nvme_count,
        "nvme_size_gb": offer.nvme_size_gb,
        "network_gbps": offer.network_gbps,
        "price_per_hour": _r(offer.price_per_hour),
        "price_per_gpu_hour": _r(offer.price_per_gpu_hour),
        "price_per_pflop_hour": _r(
            offer.price_per_pflop_hour(spec.bf16_tflops, spec.memory_gb) if spec else None
        ),
        "price_per_gb_hour": _r(offer.price_per_gb_hour, 6),
        "price_source": offer.price_source,
        "observed_at": offer.observed_at,
        "stale": stale,
        "flags": flags,
    }


@dataclass(frozen=True)
class Column:
    title: str
    key: str
    fmt: Callable[[Any], str] = str
    align_right: bool = False


def _money(x: Any) -> str:
    return "-" if x is None else f"{x:,.2f}" if x >= 10 else f"{x:.3f}"


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:g}"


def _gb(x: Any) -> str:
    return "-" if not x else f"{x:,.0f}"


def _notes(flags: Any) -> str:
    return ",".join(FLAG_NOTES.get(f, f) for f in flags)


OFFER_COLUMNS: tuple[Column, ...] = (
    Column("PROVIDER", "provider"),
    Column("INSTANCE", "instance_type"),
    Column("REGION", "region"),
    Column("ZONE", "zone"),
    Column("MARKET", "market"),
    Column("GPU", "gpu"),
    Column("N", "gpu_count", _num, True),
    Column("GPU_GB", "gpu_memory_gb", _num, True),
    Column("VCPU", "vcpus", _num, True),
    Column("RAM_GB", "memory_gb", _num, True),
    Column("NVME_GB", "nvme_gb", _gb, True),
    Column("$/H", "price_per_hour", _money, True),
    Column("$/GPU-H", "price_per_gpu_hour", _money, True),
    Column("$/PFLOP-H", "price_per_pflop_hour", _money, True),
    Column("NOTE", "flags", _notes),
)


def spec_record(
    spec: GpuSpec,
    cheapest: dict[str, tuple[float, str, bool]],
    free: Sequence[str] = (),
) -> dict[str, Any]:
    """JSON object of one GPU spec plus its cheapest $/GPU-hour per market (and whether
    that price is stale), and the providers that offer it in a free tier."""
    od, spot = cheapest.get("on_demand"), cheapest.get("spot")
    return {
        "name": spec.name,
        "family": spec.family,
        "kind": spec.kind,
        "vendor": spec.vendor,
        "architecture": spec.architecture,
        "memory_gb": spec.memory_gb,
        "memory_bw_tbs": spec.memory_bw_tbs or None,
        "bf16_tflops": spec.bf16_tflops or None,
        "fp8_tflops": spec.fp8_tflops,
        "fp32_tflops": spec.fp32_tflops or None,
        "link": spec.link,
        "link_gbps": spec.link_gbps or None,
        "tdp_w": spec.tdp_w or None,
        "purchase_usd": spec.purchase_usd,
        "cheapest_on_demand_gpu_hour": _r(od[0]) if od else None,
        "cheapest_on_demand_provider": od[1] if od else None,
        "cheapest_spot_gpu_hour": _r(spot[0]) if spot else None,
        "cheapest_spot_provider": spot[1] if spot else None,
        "cheapest_on_demand_stale": od[2] if od else None,
        "cheapest_spot_stale": spot[2] if spot else None,
        # Providers with a free tier for it (Kaggle, Colab), e.g. "colab,kaggle"; None.
        "free_tier": ",".join(free) if free else None,
        "aliases": list(spec.aliases),
        "source": spec.source,
        "date": spec.date,
    }


def _with_provider(market: str) -> Callable[[Any], str]:
    def cell(rec: dict[str, Any]) -> str:
        price = rec[f"cheapest_{market}_gpu_hour"]
        if price is None:
            return "-"
        stale = " (stale)" if rec[f"cheapest_{market}_stale"] else ""
        return f"{_money(price)} {rec[f'cheapest_{market}_provider']}{stale}"

    return cell


SPEC_COLUMNS: tuple[Column, ...] = (
    Column("GPU", "name"),
    Column("VENDOR", "vendor"),
    Column("ARCH", "architecture"),
    Column("MEM_GB", "memory_gb", _num, True),
    Column("TB/S", "memory_bw_tbs", _num, True),
    Column("BF16_TF", "bf16_tflops", _num, True),
    Column("FP8_TF", "fp8_tflops", _num, True),
    Column("FP32_TF", "fp32_tflops", _num, True),
    Column("LINK", "link"),
    Column("GB/S", "link_gbps", _num, True),
    Column("TDP_W", "tdp_w", _num, True),
    Column("BUY_$", "purchase_usd", _gb, True),
    Column("ON-DEMAND $/GPU-H", "*od", _with_provider("on_demand")),
    Column("SPOT $/GPU-H", "*spot", _with_provider("spot")),
    Column("FREE", "free_tier", lambda v: v or "-"),
)


def _cell(col: Column, rec: dict[str, Any]) -> str:
    value = rec if col.key.startswith("*") else rec.get(col.key)
    return col.fmt(value)


def _table(records: Sequence[dict[str, Any]], columns: Sequence[Column], width: int | None) -> str:
    cells = [[_cell(c, r) for c in columns] for r in records]
    right = {i for i, c in enumerate(columns) if c.align_right}
    return "\n".join(render_table([c.title for c in columns], cells, right=right, width=width))


def _markdown(records: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    head = "| " + " | ".join(c.title for c in columns) + " |"
    rule = "|" + "|".join("---:" if c.align_right else "---" for c in columns) + "|"
    rows = [
        "| " + " | ".join(_cell(c, r).replace("|", "\\|") for c in columns) + " |" for r in records
    ]
    return "\n".join([head, rule, *rows])


def _csv_value(v: Any) -> Any:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ";".join(map(str, v))
    return "" if v is None else v


def _csv(records: Sequence[dict[str, Any]], keys: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(keys)
    for rec in records:
        writer.writerow([_csv_value(v) for v in (rec.get(k) for k in keys)])
    return buf.getvalue().rstrip("\n")


def render(
    records: Sequence[dict[str, Any]],
    fmt: str,
    columns: Sequence[Column],
    keys: Sequence[str] | None = None,
    width: int | None = None,
) -> str:
    """Render records; ``keys`` are the CSV columns (default: every key of the records),
    ``width`` the terminal's (a table narrows its widest text columns to fit)."""
    if fmt == "json":
        return json.dumps(list(records), indent=2)
    if fmt == "csv":
        all_keys = keys or (list(records[0]) if records else [c.key for c in columns])
        return _csv(records, all_keys)
    if fmt == "markdown":
        return _markdown(records, columns)
    return _table(records, columns, width)
