"""`cloudgpu offers`: every provider's GPU offers in one filtered, ranked table.

Thin: parses options into an OfferQuery, loads the catalog (files only: no provider
plugin, no cloud SDK is imported), runs the query and prints one format.
"""

from __future__ import annotations

import difflib
from datetime import UTC, datetime
from typing import Any

import click

from cloudgpu.catalog.catalog import (
    DEFAULT_STALE_DAYS,
    Catalog,
    SourceInfo,
    bundled_providers,
    cached_providers,
    load_catalog,
)
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.catalog.present import OFFER_COLUMNS, OFFER_KEYS, offer_record, render
from cloudgpu.catalog.query import (
    GROUPINGS,
    SORTS,
    OfferQuery,
    gpu_names,
    parse_amount,
    require_offers,
)
from cloudgpu.cli import measured
from cloudgpu.cli.context import App, get_app
from cloudgpu.cli.params import PRICE, Number
from cloudgpu.errors import CatalogError, CloudGPUError, ConfigError
from cloudgpu.registry import has_live_prices
from cloudgpu.texttable import terminal_width

DEFAULT_LIMIT = 30


def split_list(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated and comma-separated option values, in order, without duplicates."""
    out = [v.strip() for raw in values for v in raw.split(",") if v.strip()]
    return tuple(dict.fromkeys(out))


def output_format(as_json: bool, as_csv: bool, as_md: bool) -> str:
    chosen = [n for n, on in (("json", as_json), ("csv", as_csv), ("markdown", as_md)) if on]
    if len(chosen) > 1:
        raise ConfigError(f"choose one output format, not {' and '.join('--' + c for c in chosen)}")
    return chosen[0] if chosen else "table"


def stale_days(app: App, override: float | None) -> float:
    if override is not None:
        return override
    value = app.config.defaults().get("stale_after_days", DEFAULT_STALE_DAYS)
    if not isinstance(value, int | float) or value <= 0:
        raise ConfigError(
            f"{app.paths.config_file}: defaults.stale_after_days: expected a positive number"
        )
    return float(value)


def reported_offers(
    app: App, name: str, *, strict: bool, warn: Any = None
) -> tuple[list[Offer], SourceInfo | None]:
    """Offers a provider with no catalog table reports itself (local, ssh, sim, or a
    plugin's ``offers()``). ``strict`` (the user named it): a disabled provider, or one
    whose prices come only from `catalog refresh`, is an error saying what to do; else
    it is skipped, with ``warn`` told why a configured one failed."""
    try:
        provider = app.registry.get(name)
        available = provider.availability()
        if not available.enabled:
            if strict:
                raise ConfigError(f"--provider {name}: not enabled: {available.reason}")
            return [], None
        got = list(provider.offers())
    except (CloudGPUError, ImportError) as exc:
        if strict:
            raise
        if warn is not None:
            warn(f"{name}: unavailable ({exc})")
        return [], None
    if not got and strict:
        hint = (
            f"run `cloudgpu catalog refresh --provider {name}` to fetch its prices"
            if has_live_prices(provider)
            else None
        )
        raise CatalogError(f"--provider {name}: the provider reports no offers", hint=hint)
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    info = SourceInfo(name, f"{name}: reported by the provider", len(got), now, False, False, "")
    return got, info


def self_reporting(app: App, known: set[str], named: tuple[str, ...]) -> list[str]:
    """Installed providers without a catalog table worth asking for offers: those named,
    else those the config has a table for (asking the others would import them)."""
    if named:
        return [n for n in named if n not in known]
    return [n for n in app.registry.names() if n not in known and app.config.provider(n)]


def load_for(
    app: App,
    providers: tuple[str, ...],
    stale: float | None,
    gpus: frozenset[str] | None = None,
) -> Catalog:
    """The catalog restricted to ``providers`` or, by default, to config defaults.providers,
    plus the offers of providers that report their own machines."""
    known = set(bundled_providers()) | set(cached_providers(app.paths))
    installed = set(app.registry.names())
    unknown = [p for p in providers if p not in known and p not in installed]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known | installed), n=1)
        raise ConfigError(
            f"--provider {unknown[0]}: no such provider "
            f"(installed: {', '.join(sorted(installed))}; "
            f"priced in the catalog: {', '.join(sorted(known))})",
            hint=f"did you mean {close[0]}?" if close else None,
        )
    default = app.config.defaults().get("providers")
    names = providers or (tuple(default) if isinstance(default, list) and default else ())
    catalog = load_catalog(
        app.paths,
        [n for n in names if n in known] if names else None,
        stale_after_days=stale_days(app, stale),
        gpus=gpus,
    )
    warn = lambda m: click.echo(f"note: {m}", err=True)  # noqa: E731
    for name in self_reporting(app, known, names):
        got, info = reported_offers(app, name, strict=bool(providers), warn=warn)
        if info is not None:
            catalog.offers.extend(o for o in got if gpus is None or o.gpu in gpus)
            catalog.sources[name] = info
    return catalog


def _market(spot: bool, on_demand: bool) -> str | None:
    if spot and on_demand:
        raise ConfigError("--spot and --on-demand contradict each other; give one or neither")
    return "spot" if spot else "on_demand" if on_demand else None


def build_query(opts: dict[str, Any], provider_regions: dict[str, list[str]]) -> OfferQuery:
    def amount(key: str, what: str) -> Any:
        return parse_amount(opts[key], what) if opts[key] is not None else None

    def floor(key: str, what: str) -> float | None:  # '' is refused, not "no filter"
        return parse_amount(opts[key], what).value if opts[key] is not None else None

    limit = opts["limit"]
    if limit is not None and limit > 0:
        limit += 1  # one more than shown: tells the footer that rows were left out
    return OfferQuery(
        gpu=opts["gpu"],
        gpus=amount("gpus", "--gpus"),
        min_gpu_memory=floor("min_gpu_memory", "--min-gpu-memory"),
        cpus=amount("cpus", "--cpus"),
        memory=amount("memory", "--memory"),
        nvme_gb=floor("nvme", "--nvme"),
        market=_market(opts["spot"], opts["on_demand"]),
        providers=split_list(opts["provider"]),
        regions=split_list(opts["region"]),
        max_price=opts["max_price"],
        sort=opts["sort"],
        cheapest_per=opts["cheapest_per"],
        limit=None if limit == 0 else limit,
        include_non_gpu=opts["all_accelerators"],
        free=opts["free"],
        provider_regions=provider_regions,
    )


@click.command("offers")
@click.option("--gpu", help="GPU name, family or alias (H100, a100-80gb), NAME:COUNT, or 24GB+.")
@click.option("--gpus", help="GPUs per instance: N (exactly) or N+ (at least).")
@click.option("--min-gpu-memory", help="At least this much memory per GPU, in GB (e.g. 40).")
@click.option("--cpus", help="vCPUs: N (exactly) or N+ (at least).")
@click.option("--memory", help="RAM in GB: N (exactly) or N+ (at least), e.g. 128GB+.")
@click.option("--nvme", help="At least this much local NVMe in total, in GB (e.g. 500).")
@click.option("--spot", is_flag=True, help="Spot/preemptible offers only.")
@click.option("--on-demand", is_flag=True, help="On-demand offers only.")
@click.option("--provider", multiple=True, help="Only these providers (repeat or comma-separate).")
@click.option("--region", multiple=True, help="Region or zone glob, e.g. 'us-*' (repeatable).")
@click.option("--max-price", type=PRICE, help="At most this many USD per instance-hour.")
@click.option(
    "--free", is_flag=True,
    help="Only free tiers (Kaggle, Colab): $0 within session and weekly quota limits.",
)  # fmt: skip
@click.option("--sort", type=click.Choice(SORTS), default="price", show_default=True)
@click.option("--cheapest-per", type=click.Choice(GROUPINGS), help="Keep the best offer per group.")
@click.option(
    "--limit", type=Number(0, 1_000_000, integer=True), default=None,
    help=f"Rows to show; 0 = all (default: {DEFAULT_LIMIT} in a table, all in JSON/CSV).",
)  # fmt: skip
@click.option(
    "--all-accelerators", is_flag=True,
    help="Include non-GPU accelerators (Inferentia, Trainium, Gaudi, FPGAs).",
)  # fmt: skip
@click.option(
    "--stale-days", type=Number(0, 36_500, lo_open=True),
    help="Mark prices older than this many days as stale (default 30, or the config's).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list of objects).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@click.option("--markdown", "as_md", is_flag=True, help="Print a Markdown table.")
def offers(**opts: Any) -> None:
    """Compare GPU offers across providers: price, GPU, CPU, RAM, NVMe, $/GPU-hour.

    Works offline from the bundled, dated snapshot; `cloudgpu catalog refresh` replaces
    a provider's snapshot with live prices. Stale prices are marked in every format.
    """
    fmt = output_format(opts.pop("as_json"), opts.pop("as_csv"), opts.pop("as_md"))
    shown = opts["limit"]
    if shown is None:  # data for scripts is never cut short silently
        shown = DEFAULT_LIMIT if fmt in ("table", "markdown") else 0
    opts["limit"] = shown
    app = get_app()
    query = build_query(opts, app.config.provider_regions())
    registry = load_registry()
    names = gpu_names(query.gpu, registry) if query.gpu else None
    catalog = load_for(app, query.providers, opts["stale_days"], names)
    if names is not None and not catalog.offers:
        raise CatalogError(
            f"no offers left: --gpu {query.gpu} matches none of the "
            f"{catalog.total_offers()} offers in the catalog",
            hint="`cloudgpu gpus --priced` lists the GPUs that have offers",
        )
    rows = require_offers(catalog.offers, query, registry, total=catalog.total_offers())
    more = bool(shown) and len(rows) > shown
    records = [offer_record(o, catalog, registry) for o in rows[: shown or None]]
    columns, keys = measured.offers(app, records, OFFER_COLUMNS, OFFER_KEYS)
    click.echo(render(records, fmt, columns, keys, width=terminal_width()))
    if fmt in ("table", "markdown"):
        click.echo(_footer(catalog, records, set(app.registry.names()), more), err=True)
        limits = free_tier_limits(rows)
        if limits:
            click.echo(limits, err=True)
    elif more:
        click.echo(f"note: first {shown} rows (--limit); --limit 0 prints all", err=True)


def free_tier_limits(rows: list[Offer]) -> str:
    """One line on what $0 means for the free-tier rows shown: their session and quota."""
    seen: dict[str, str] = {}
    for o in rows:
        if FLAG_FREE_TIER not in o.flags or o.provider in seen:
            continue
        session = o.extra.get("session_hours") or 0
        quota = o.extra.get("weekly_quota_hours") or 0
        week = f"{quota:g} GPU-h/week" if quota else "no published weekly quota"
        seen[o.provider] = f"{o.provider}: sessions of at most {session:g} h, {week}"
    return ("Free tiers: " + "; ".join(seen.values())) if seen else ""


def _footer(
    catalog: Catalog, records: list[dict[str, Any]], installed: set[str], more: bool = False
) -> str:
    """Where the shown prices come from, how old they are, and which providers can only
    be compared (bundled prices, but no plugin to launch on)."""
    shown = sorted({r["provider"] for r in records})
    parts = []
    for name in shown:
        info = catalog.sources[name]
        where = "refreshed" if info.from_cache else "snapshot" if info.path else "reported"
        mark = " STALE" if info.stale else ""
        parts.append(f"{name}: {where} {info.observed_at[:10]} ({info.age_days:.0f} d){mark}")
    text = f"{len(records)} offer{'s' if len(records) != 1 else ''} shown"
    text += " (more match: --limit N or 0 for all). Prices: " if more else ". Prices: "
    text += "; ".join(parts)
    compare_only = [name for name in shown if name not in installed]
    if compare_only:
        text += f"\nNo provider plugin installed for {', '.join(compare_only)}: compare only."
    return text
