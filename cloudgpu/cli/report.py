"""`cloudgpu report offers|spend|buy-vs-rent|plan`: cost reports as one self-contained
HTML file, Markdown, CSV or JSON.

Each subcommand gathers its data (catalog, state store, buy-vs-rent model, planner),
lets cloudgpu.reports build and render the document, and writes it to --out (atomically)
or stdout. No numbers are computed here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from cloudgpu.catalog import OfferQuery, load_catalog, load_registry, parse_amount, require_offers
from cloudgpu.cli.buyrent import buyrent_options, compute, report_for
from cloudgpu.cli.context import get_app
from cloudgpu.cli.params import PRICE
from cloudgpu.cli.plan import ALL_PROVIDERS_HELP
from cloudgpu.cli.sources import choose
from cloudgpu.costs import parse_since, summarize
from cloudgpu.errors import ConfigError
from cloudgpu.planner import OBJECTIVES
from cloudgpu.reports.model import Report
from cloudgpu.reports.offers import offers_report
from cloudgpu.reports.plan import plan_report
from cloudgpu.reports.render import FORMATS, render, to_csv
from cloudgpu.reports.spend import spend_report
from cloudgpu.scaffold import job_file_for
from cloudgpu.userfile import UnwritableFile, write_user_file

F = Callable[..., Any]
_SUFFIXES = {
    ".html": "html",
    ".htm": "html",
    ".md": "md",
    ".markdown": "md",
    ".csv": "csv",
    ".json": "json",
}


def output_options(func: F) -> F:
    func = click.option(
        "--table",
        "table",
        metavar="NAME",
        help="Only this table (CSV: print it; without it CSV needs --out and writes one "
        "FILE-NAME.csv per table).",
    )(func)
    func = click.option(
        "--out",
        "out",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write here instead of stdout.",
    )(func)
    func = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        help="Default: from --out's suffix, else html.",
    )(func)
    return func


def choose_format(fmt: str | None, out: Path | None) -> str:
    if fmt:
        return fmt
    if out is not None and out.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[out.suffix.lower()]
    return "html"


def write_out(text: str, out: Path | None) -> None:
    """Print, or write ``out`` the way the user named it (cloudgpu.userfile): a regular
    file atomically, through a symlink they gave, into a FIFO or device in place."""
    if out is None or str(out) in ("-", "/dev/stdout"):
        click.echo(text, nl=False)
        return
    if str(out) == "/dev/stderr":
        click.echo(text, nl=False, err=True)
        return
    try:
        regular = write_user_file(out, text)
    except UnwritableFile as exc:
        raise ConfigError(f"--out {out}: {exc}", hint="choose a writable path") from None
    if regular:
        click.echo(f"wrote {out} ({len(text.encode()) / 1024:.0f} KiB)", err=True)


def emit(report: Report, fmt: str | None, out: Path | None, table: str | None = None) -> None:
    """Render and write; CSV is one table per file (pandas.read_csv loads each as is)."""
    fmt = choose_format(fmt, out)
    names = [t.id for t in report.tables]
    if table is not None and table not in names:
        raise ConfigError(f"--table {table}: this report's tables are {', '.join(names)}")
    if table is not None:
        report = replace(
            report,
            tables=[report.table(table)],
            charts=[c for c in report.charts if c.table == table],
        )
    if fmt != "csv":
        write_out(render(report, fmt), out)
        return
    if table is not None:
        write_out(to_csv(report.tables[0]), out)
        return
    if out is None:
        raise ConfigError(
            "CSV holds one table per file: give --table NAME "
            f"({', '.join(names)}) or --out FILE.csv (writes FILE-NAME.csv for each)"
        )
    for t in report.tables:
        write_out(to_csv(t), out.with_name(f"{out.stem}-{t.id}{out.suffix or '.csv'}"))


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


@click.group("report")
def report() -> None:
    """Cost reports: HTML (one offline file with charts), Markdown, CSV, JSON."""


@report.command("offers")
@click.option("--gpu", help="GPU name or family, NAME:COUNT, or a memory floor like 24GB+.")
@click.option("--gpus", help="GPUs per instance: 8 or 8+.")
@click.option("--market", type=click.Choice(["on_demand", "spot"]))
@click.option("--provider", "providers", multiple=True, help="Repeatable.")
@click.option("--region", "regions", multiple=True, help="Glob, repeatable.")
@click.option("--max-price", type=PRICE, help="USD per instance-hour.")
@output_options
def offers_cmd(
    gpu: str | None,
    gpus: str | None,
    market: str | None,
    providers: tuple[str, ...],
    regions: tuple[str, ...],
    max_price: float | None,
    fmt: str | None,
    out: Path | None,
    table: str | None,
) -> None:
    """$/GPU-hour by GPU and provider (on-demand vs spot) and performance per dollar."""
    app = get_app()
    registry = load_registry()
    catalog = load_catalog(app.paths, warn=lambda m: click.echo(f"warning: {m}", err=True))
    query = OfferQuery(
        provider_regions=app.config.provider_regions(),
        gpu=gpu,
        gpus=parse_amount(gpus, "--gpus") if gpus else None,
        market=market,
        providers=providers,
        regions=regions,
        max_price=max_price,
    )
    offers = require_offers(catalog.offers, query, registry)
    tflops = {s.name: s.bf16_tflops for s in registry.all() if s.bf16_tflops}
    filters = " ".join(
        f"{k}={v}"
        for k, v in (("gpu", gpu), ("gpus", gpus), ("market", market), ("max-price", max_price))
        if v
    )
    note = f" ({filters})" if filters else ""
    report_ = offers_report(offers, tflops, _now_text(), note, is_stale=catalog.is_stale)
    emit(report_, fmt, out, table)


@report.command("spend")
@click.option(
    "--since", help="Window like 30d, 12h, 2w, 10m (minutes), or a date (default: everything)."
)
@output_options
def spend_cmd(since: str | None, fmt: str | None, out: Path | None, table: str | None) -> None:
    """What was spent, per job, provider, GPU and day; the rows add up to the total."""
    app = get_app()
    since_ts = parse_since(since, time.time()) if since is not None else None
    store = app.store()
    try:
        summary = summarize(store.spend(since=since_ts), since_ts)
    finally:
        store.close()
    emit(spend_report(summary, _now_text()), fmt, out, table)


@report.command("buy-vs-rent")
@buyrent_options
@output_options
def buy_vs_rent_cmd(fmt: str | None, out: Path | None, table: str | None, **params: Any) -> None:
    """The buy-vs-rent analysis with cumulative cost lines and the break-even marked."""
    emit(report_for(compute(get_app(), params)), fmt, out, table)


@report.command("plan")
@click.argument("job_file", type=click.Path(dir_okay=False))
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default="cheapest",
    show_default=True,
    help="Rank by total cost, speed, or $/hour.",
)
@click.option("--all-providers", is_flag=True, help=ALL_PROVIDERS_HELP)
@output_options
def plan_cmd(
    job_file: str,
    objective: str,
    all_providers: bool,
    fmt: str | None,
    out: Path | None,
    table: str | None,
) -> None:
    """The machines that fit JOB_FILE, ranked by estimated total cost, with charts."""
    app = get_app()
    job = app.load_job(job_file_for(job_file, Path.cwd())[0])
    choice = choose(app, job, objective=objective, all_providers=all_providers)
    emit(plan_report(choice.plan, job.name or Path(job_file).name, _now_text()), fmt, out, table)
