"""`cloudgpu catalog info` and `cloudgpu catalog refresh`.

`info` reads files only. `refresh` asks each provider plugin for live offers
(Provider.fetch_offers) and writes them to the cache, where they replace that provider's
bundled snapshot. A provider that cannot be imported, is not enabled, has no live price
source, or fails (auth, throttling, ...) is reported on its own line and its cache is
left untouched; the others still refresh.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass
from typing import Any

import click

from cloudgpu.catalog.catalog import SourceInfo, load_catalog, write_cache
from cloudgpu.catalog.offer import Offer
from cloudgpu.cli.context import App, get_app
from cloudgpu.cli.offers import split_list, stale_days
from cloudgpu.cli.params import Number
from cloudgpu.errors import CloudGPUError, ConfigError, ProviderError, redact
from cloudgpu.registry import has_live_prices
from cloudgpu.texttable import render_table, terminal_width


@click.group("catalog")
def catalog() -> None:
    """Inspect and refresh the offer catalog (bundled snapshot + refreshed cache)."""


def _info_record(info: SourceInfo) -> dict[str, Any]:
    return {
        "provider": info.provider,
        "source": info.source,
        "offers": info.offer_count,
        "observed_at": info.observed_at,
        "age_days": round(info.age_days, 2),
        "origin": "cache" if info.from_cache else "snapshot",
        "stale": info.stale,
        "path": info.path,
        "skipped": info.skipped,
    }


@catalog.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--stale-days", "stale_days_opt", type=Number(0, 36_500, lo_open=True),
    help="Mark sources older than this many days as stale (default 30, or the config's).",
)  # fmt: skip
def info(as_json: bool, stale_days_opt: float | None) -> None:
    """Per provider: where its offers come from, how many, and how old they are."""
    app = get_app()
    cat = load_catalog(app.paths, stale_after_days=stale_days(app, stale_days_opt))
    records = [_info_record(cat.sources[name]) for name in cat.providers()]
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    rows = []
    for r in records:
        age = f"{r['age_days']:.1f} d" + (" STALE" if r["stale"] else "")
        skipped = sum(v for k, v in r["skipped"].items() if not k.startswith("kept"))
        rows.append(
            [
                r["provider"],
                str(r["offers"]),
                r["origin"],
                r["observed_at"][:10],
                age,
                str(skipped) if skipped else "-",
                r["source"],
            ]
        )
    headers = ["PROVIDER", "OFFERS", "ORIGIN", "OBSERVED", "AGE", "SKIPPED", "SOURCE"]
    for line in render_table(headers, rows, right={1, 5}, width=terminal_width()):
        click.echo(line)
    click.echo(f"cache: {app.paths.catalog_cache}  (stale after {cat.stale_after_days:g} days)")


STATUSES = ("refreshed", "skipped", "failed", "unknown")


@dataclass
class Outcome:
    provider: str
    status: str  # one of STATUSES
    detail: str


def _source_text(name: str, offers: list[Offer]) -> str:
    kinds = sorted({o.price_source for o in offers if o.price_source})
    return f"{name} live refresh ({', '.join(kinds) or 'provider APIs'})"


def refresh_one(app: App, name: str, announce: Any = None) -> Outcome:
    """Fetch and cache one provider's offers; every failure becomes an Outcome.
    ``announce(name)`` is called only when a fetch really starts."""
    if name not in app.registry.names():
        close = difflib.get_close_matches(name, app.registry.names(), n=1)
        maybe = f"; did you mean {close[0]}?" if close else ""
        return Outcome(name, "unknown", f"unknown provider '{name}'{maybe}")
    try:
        provider = app.registry.get(name)
    except CloudGPUError as exc:
        return Outcome(name, "failed", str(exc))
    except Exception as exc:  # a broken plugin must not take the other providers down
        return Outcome(name, "failed", f"cannot load plugin: {type(exc).__name__}: {exc}")
    if not has_live_prices(provider):
        return Outcome(name, "skipped", "no live price source")
    try:
        available = provider.availability()
        if not available.enabled:
            return Outcome(name, "skipped", f"not enabled: {available.reason}")
        if announce is not None:
            announce(name)
        offers = provider.fetch_offers()
        path = write_cache(app.paths, name, offers, _source_text(name, offers))
    except CloudGPUError as exc:
        hint = f" (hint: {exc.hint})" if exc.hint else ""
        return Outcome(name, "failed", f"{exc}{hint}; cache left unchanged")
    except Exception as exc:  # plugin bug: report it on its line, keep going
        return Outcome(name, "failed", f"{type(exc).__name__}: {exc}; cache left unchanged")
    return Outcome(name, "refreshed", f"{len(offers)} offers -> {path}")


@catalog.command("refresh")
@click.option("--provider", "providers", multiple=True, help="Only these (repeat or comma).")
@click.option("--json", "as_json", is_flag=True, help="One object per provider, as JSON.")
def refresh(providers: tuple[str, ...], as_json: bool) -> None:
    """Fetch live prices from each enabled provider's own APIs into the cache.

    \b
    Exit status: 0 when every provider asked for (or, without --provider, every enabled
    one with a live price source) refreshed; 2 when a named provider is unknown, not
    enabled or has no live price source; 4 when a provider's API call failed.
    Providers that fail keep their previous prices.
    """
    app = get_app()
    named = split_list(providers)
    names = list(named) or app.registry.names()
    announce = None if as_json else lambda n: click.echo(f"{n}: refreshing...", err=True)
    outcomes = [refresh_one(app, name, announce) for name in names]
    if as_json:
        click.echo(redact(json.dumps([asdict(o) for o in outcomes], indent=2)))
    else:
        for out in outcomes:
            click.echo(redact(f"{out.provider:8} {out.status:9} {out.detail}"))
    by = {k: [o.provider for o in outcomes if o.status == k] for k in STATUSES}
    if not as_json:
        click.echo(
            f"refreshed {len(by['refreshed'])} of {len(outcomes)} provider(s); skipped "
            f"{len(by['skipped'])} (not enabled or no live price source; `cloudgpu check` "
            f"says why), failed {len(by['failed'])}",
            err=True,
        )
    if by["failed"]:
        raise ProviderError(f"refresh failed for: {', '.join(by['failed'])}")
    # Asked-for providers must refresh; in the sweep of all, skipping is normal.
    wrong = by["unknown"] + (by["skipped"] if named else [])
    if wrong:
        raise ConfigError(
            f"cannot refresh: {', '.join(wrong)}",
            hint="`cloudgpu check` says which providers are enabled and why",
        )
