"""`cloudgpu buy-vs-rent`: at what utilization owning GPUs beats renting them.

Loads the GPU registry, the offer catalog, the ``[buy_vs_rent]`` config table and
(with --from-history) the state store, then hands plain data to cloudgpu.costs. Every
model input is a flag named after its key; `cloudgpu report buy-vs-rent` reuses
:func:`buyrent_options` and :func:`compute` so both take the same flags.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import click

from cloudgpu.catalog import GpuRegistry, GpuSpec, load_catalog, load_registry
from cloudgpu.cli.context import App, get_app
from cloudgpu.cli.params import Number
from cloudgpu.costs import (
    DEFAULTS,
    BuyRentResult,
    Hardware,
    HistoryRow,
    TcoInputs,
    analyse,
    hardware_for,
    history_rows,
    parse_since,
    rent_options,
    resolve_inputs,
)
from cloudgpu.costs.free import FreeTierFit, free_tier_fits
from cloudgpu.errors import ConfigError
from cloudgpu.reports.buyrent import buyrent_report
from cloudgpu.reports.model import Report
from cloudgpu.reports.offers import source_and_date
from cloudgpu.reports.render import text_table
from cloudgpu.texttable import terminal_width

F = Callable[..., Any]


def buyrent_options(func: F) -> F:
    """The flags of buy-vs-rent: GPU, count, one per model input, history, providers."""
    for d in reversed(DEFAULTS):
        default = "derived" if d.value is None else f"{d.value:.4g}"
        func = click.option(
            "--" + d.key.replace("_", "-"),
            d.key,
            metavar="N",
            help=f"{d.unit} (default {default}: {d.source})",
        )(func)
    func = click.option(
        "--provider",
        "providers",
        multiple=True,
        help="Only rent options from this provider (repeatable).",
    )(func)
    func = click.option(
        "--from-history",
        "from_history",
        metavar="WINDOW",
        help="Also compare the GPU-hours you rented in WINDOW (e.g. 90d).",
    )(func)
    func = click.option(
        "--count",
        type=Number(1, 999, integer=True),
        default=8,
        show_default=True,
        help="GPUs per server (and per rented instance).",
    )(func)
    func = click.option("--gpu", required=True, help="GPU model, e.g. H100-SXM.")(func)
    return func


@dataclass
class Computed:
    result: BuyRentResult
    catalog_source: str
    catalog_date: str
    history: tuple[list[HistoryRow], float] | None
    free: list[FreeTierFit] = field(default_factory=list)


def compute(app: App, params: dict[str, Any], now: float | None = None) -> Computed:
    """Everything the command and the report need, from the parsed flags."""
    now = time.time() if now is None else now
    overrides = {d.key: params.get(d.key) for d in DEFAULTS}
    origin = str(app.config.source or "config.toml")
    inputs = resolve_inputs(app.config.section("buy_vs_rent"), overrides, origin)
    registry = load_registry()
    spec = one_gpu(registry, params["gpu"])
    hw = hardware_for(spec.name, params["count"], spec.purchase_usd, spec.tdp_w, inputs)
    catalog = load_catalog(app.paths, warn=lambda m: click.echo(f"warning: {m}", err=True))
    offers = catalog.offers
    if params.get("providers"):
        offers = [o for o in offers if o.provider in params["providers"]]
    options = rent_options(offers, spec.name, params["count"], inputs)
    matching = [o for o in offers if o.gpu == spec.name and o.gpu_count == params["count"]]
    source, date = source_and_date(matching)
    history = None
    if params.get("from_history"):
        history = _history(app, registry, params, inputs, hw, now)
    free = free_tier_fits(offers, spec.name, params["count"], inputs.utilization)
    return Computed(analyse(hw, inputs, options), source, date, history, free)


def _history(
    app: App,
    registry: GpuRegistry,
    params: dict[str, Any],
    inputs: TcoInputs,
    hw: Hardware,
    now: float,
) -> tuple[list[HistoryRow], float]:
    window = params["from_history"]
    since = parse_since(window, now, origin="--from-history")
    days = (now - since) / 86400.0
    store = app.store()
    try:
        records = store.spend(since=since)
    finally:
        store.close()
    hardware: dict[str, Hardware | str] = {hw.gpu: hw}
    # Other GPUs rented in the window are priced from the registry alone: --server-price
    # and --kw-max describe the --gpu server only.
    generic = inputs.with_values(server_price=None, kw_max=None)
    for gpu in {r.gpu for r in records if r.gpu and r.gpu != hw.gpu}:
        spec = registry.spec(gpu)
        try:
            if spec is None:
                raise ConfigError(f"{gpu}: not in the GPU registry")
            hardware[gpu] = hardware_for(
                gpu, params["count"], spec.purchase_usd, spec.tdp_w, generic
            )
        except ConfigError as exc:
            hardware[gpu] = str(exc).split(";")[0]
    return history_rows(records, days, hardware, inputs), days


def one_gpu(registry: GpuRegistry, name: str) -> GpuSpec:
    """The single GPU model ``name`` means; a family ("A100") must be narrowed."""
    spec = registry.spec(name)
    if spec is not None:
        return spec
    names = sorted(registry.matches(name))  # CatalogError with suggestions when unknown
    if len(names) > 1:
        raise ConfigError(
            f"--gpu {name}: means several GPU models ({', '.join(names)})",
            hint="buy-vs-rent prices one server: name one model",
        )
    return registry.require(names[0])


def report_for(c: Computed) -> Report:
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return buyrent_report(c.result, c.catalog_source, c.catalog_date, generated, c.history)


def json_doc(c: Computed) -> dict[str, Any]:
    doc = c.result.to_dict()
    doc["rent_source"] = c.catalog_source
    doc["rent_observed"] = c.catalog_date
    doc["free_tiers"] = [f.to_dict() for f in c.free]
    if c.history is not None:
        doc["history"] = {
            "days": round(c.history[1], 3),
            "rows": [r.to_dict() for r in c.history[0]],
        }
    return doc


@click.command("buy-vs-rent")
@buyrent_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def buy_vs_rent(as_json: bool, **params: Any) -> None:
    """When owning GPUs beats renting them: break-even utilization and payback.

    Example: cloudgpu buy-vs-rent --gpu H100-SXM --count 8 --utilization 60% --years 4
    """
    computed = compute(get_app(), params)
    if as_json:
        click.echo(json.dumps(json_doc(computed), indent=2, allow_nan=False))
        return
    report = report_for(computed)
    click.echo(report.summary[0])
    for line in report.summary[1:]:
        click.echo(line)
    for fit in computed.free:
        click.echo(fit.line())
    wanted = ("options", "history", "owned", "sens_years", "sens_power", "inputs")
    for table_id in wanted:
        for table in report.tables:
            if table.id == table_id:
                click.echo("")
                click.echo(text_table(table, width=terminal_width()))
    click.echo("")
    click.echo(f"Data: {report.source}; rent prices observed {report.data_date}.")
