"""The buy-versus-rent report (and the tables the CLI prints): verdict first, then rent
options with break-even and payback, cumulative cost lines with the break-even marked,
the owned cost breakdown, sensitivity tables, inputs with sources, and optionally the
user's own history. Builds a Report from a BuyRentResult; computes no costs itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from cloudgpu.catalog.offer import PRICE_FLAG_TEXT
from cloudgpu.costs.compare import (
    BuyRentResult,
    OptionResult,
    Sensitivity,
    inputs_table,
    owned_breakdown,
    price_caveats,
)
from cloudgpu.costs.defaults import SOURCES_DATE
from cloudgpu.costs.history import HistoryRow
from cloudgpu.reports.model import Chart, Column, Report, Table

MAX_LINES = 6  # rent options drawn next to owning: more lines stop being readable


def options_table(result: BuyRentResult) -> Table:
    rows = [
        {
            "label": r.option.label,
            "provider": r.option.provider,
            "market": r.option.market,
            "instance_type": r.option.instance_type,
            "region": r.option.region,
            "price_per_gpu_hour": r.option.price_per_gpu_hour,
            "effective_per_gpu_hour": r.option.effective_per_gpu_hour,
            "breakeven_utilization": r.breakeven_utilization,
            "payback_months": r.payback_months,
            "rent_cost_per_year": r.rent_cost_yr,
            "price_flags": ", ".join(
                PRICE_FLAG_TEXT[f] for f in r.option.flags if f in PRICE_FLAG_TEXT
            ),
            "flags": ", ".join(
                f.replace("_", " ") for f in r.option.flags if f not in PRICE_FLAG_TEXT
            ),
        }
        for r in result.options
    ]
    cols = [  # "label" (provider + market) stays in the rows for the chart
        Column("provider", "Provider"),
        Column("market", "Market"),
        Column("instance_type", "Instance"),
        Column("region", "Region"),
        Column("price_per_gpu_hour", "$/GPU-h", "usd"),
        Column("price_flags", "Price flags", attach=True),
        Column("effective_per_gpu_hour", "$/busy GPU-h", "usd"),
        Column("breakeven_utilization", "Buy above", "pct"),
        Column("payback_months", "Payback (months)", "months"),
        Column("rent_cost_per_year", "Rent per year", "usd0"),
        Column("flags", "Catalog notes"),
    ]
    note = (
        "Buy above: the utilization from which owning is cheaper (n/a: renting is "
        "cheaper even at 100%). Payback: months until buying has cost less in cash "
        "(n/a: never at this utilization)."
    )
    return Table(
        "options", "Rent options (cheapest per provider and market)", cols, rows, note=note
    )


def owned_table(result: BuyRentResult) -> Table:
    labels = {
        "server_price": "Server price (USD)",
        "capex": "Capex with infrastructure (USD)",
        "kw_max": "Max power (kW)",
        "capital_recovery_factor": "Capital recovery factor",
        "residual_present_value": "Residual, today's value (USD)",
        "capital_per_year": "Capital per year (USD)",
        "power_per_year": "Power per year (USD)",
        "colocation_per_year": "Colocation per year (USD)",
        "maintenance_per_year": "Maintenance per year (USD)",
        "staff_per_year": "Staff share per year (USD)",
        "total_per_year": "Total per year (USD)",
    }
    rows = [
        {"key": k, "item": labels[k], "value": v}
        for k, v in owned_breakdown(result.cost, result.utilization).items()
    ]
    cols = [Column("key", "Key"), Column("item", "Owned server"), Column("value", "Value", "value")]
    return Table(
        "owned", f"Owning one {result.cost.hw.gpus}x {result.cost.hw.gpu} server", cols, rows
    )


def drawn_options(result: BuyRentResult) -> list[OptionResult]:
    """Up to MAX_LINES options with distinct prices, spread over the price range, so the
    chart shows both the options that always beat owning and those owning overtakes."""
    opts: list[OptionResult] = []
    for r in result.options:  # cheapest first: keep the first of equal prices
        if all(
            abs(r.option.effective_per_gpu_hour - o.option.effective_per_gpu_hour) > 0.005
            for o in opts
        ):
            opts.append(r)
    if len(opts) <= MAX_LINES:
        return opts
    picks = sorted({round(i * (len(opts) - 1) / (MAX_LINES - 1)) for i in range(MAX_LINES)})
    return [opts[i] for i in picks]


def cumulative_table(result: BuyRentResult) -> tuple[Table, list[str]]:
    lines = result.cumulative()
    keep = ["own", *[r.option.label for r in drawn_options(result)]]
    keys = {name: f"s{i}" for i, name in enumerate(keep)}
    # Quarterly rows: the lines are straight, and 49 monthly rows bury the table.
    months = sorted({*range(0, result.months + 1, 3), result.months})
    rows = [{"month": m, **{keys[n]: lines[n][m] for n in keep}} for m in months]
    cols = [Column("month", "Month", "int")]
    cols += [Column(keys[n], "Own" if n == "own" else f"Rent {n}", "usd0") for n in keep]
    note = (
        "Cash view: owning pays the capex up front, then power, colocation, maintenance "
        "and staff; renting pays for the same busy GPU-hours."
    )
    table = Table("cumulative", "Cumulative cost over the horizon", cols, rows, note=note)
    return table, [keys[n] for n in keep]


def _marks(result: BuyRentResult) -> list[tuple[float, float, str]]:
    marks = []
    for r in drawn_options(result):
        m = r.payback_months
        if m is not None and m <= result.months:
            own = result.cost.capex + result.cost.opex_yr(result.utilization) / 12 * m
            marks.append((m, own, f"{r.option.label}: {m:.0f} mo"))
    return marks


def sensitivity_table(s: Sensitivity, table_id: str, title: str) -> Table:
    row_kind = "pct" if s.row_name == "utilization" else "value"
    cols = [Column("row", s.row_name.replace("_", " "), row_kind)]
    cols += [Column(f"c{i}", f"{s.col_name} {c:g}", "usd") for i, c in enumerate(s.cols)]
    rows = [
        {"row": rv, **{f"c{i}": v for i, v in enumerate(vals)}}
        for rv, vals in zip(s.rows, s.values, strict=True)
    ]
    return Table(table_id, title, cols, rows)


def inputs_report_table(result: BuyRentResult) -> Table:
    rows = [
        {"key": r["key"], "value": r["value"], "unit": r["unit"], "source": r["source"]}
        for r in inputs_table(result.inputs)
    ]
    cols = [
        Column("key", "Input"),
        Column("value", "Value", "value"),
        Column("unit", "Unit"),
        Column("source", "Source"),
    ]
    return Table(
        "inputs",
        "Inputs and their sources",
        cols,
        rows,
        note="Override any input with --KEY or [buy_vs_rent] KEY in config.toml.",
    )


def history_table(rows: Sequence[HistoryRow], days: float) -> Table:
    data = [r.to_dict() for r in rows]
    cols = [
        Column("gpu", "GPU"),
        Column("gpu_hours", "GPU-hours rented", "num"),
        Column("rented_cost", "Rented cost", "cents"),
        Column("peak_gpus", "Peak GPUs", "int"),
        Column("servers", "Servers to own", "int"),
        Column("utilization", "Their utilization", "pct"),
        Column("owned_cost", "Owning, same window", "cents"),
        Column("saving_if_owned", "Owning would save", "cents"),
        Column("note", "Note"),
    ]
    return Table(
        "history",
        f"Your last {days:g} days: rented vs owned",
        cols,
        data,
        note="Owned servers sized to the peak GPUs running at once; their yearly "
        "cost charged for the window at the utilization your hours imply.",
    )


def buyrent_report(
    result: BuyRentResult,
    catalog_source: str,
    catalog_date: str,
    generated_at: str,
    history: tuple[Sequence[HistoryRow], float] | None = None,
) -> Report:
    hw = result.cost.hw
    cumulative, series = cumulative_table(result)
    sens = result.sensitivities
    tables = [
        options_table(result),
        cumulative,
        owned_table(result),
        sensitivity_table(
            sens[0], "sens_years", "Owned $/GPU-hour by utilization and depreciation years"
        ),
        sensitivity_table(sens[1], "sens_power", "Owned $/GPU-hour by electricity price and PUE"),
        inputs_report_table(result),
    ]
    if history is not None:
        tables.insert(1, history_table(*history))
    charts = [
        Chart(
            "options",
            "Break-even utilization per rent option",
            "bars",
            "options",
            x="label",
            series=["breakeven_utilization"],
            x_title="Break-even utilization (% of hours busy)",
            y_title="Rent option (provider, market)",
            caption="Buying is cheaper above the bar; renting below it.",
            missing_text="n/a: renting is cheaper even at 100% utilization",
        ),
        Chart(
            "cumulative",
            "Cumulative cost: own vs rent",
            "lines",
            "cumulative",
            x="month",
            series=series,
            x_title="Time (months)",
            y_title="Cumulative cost (USD)",
            marks=_marks(result),
            caption="Owning is the dashed line; circles mark "
            "where it becomes cheaper than renting.",
        ),
    ]
    return Report(
        title=f"Buy vs rent: {hw.gpus}x {hw.gpu} at {result.utilization:.0%} utilization "
        f"over {result.inputs.years:g} years",
        summary=[result.verdict(caveats=False), *price_caveats(result), _owned_line(result)],
        kind="buy-vs-rent",
        source=f"rent: {catalog_source}; owning: sourced defaults of {SOURCES_DATE} (inputs table)",
        data_date=catalog_date,
        generated_at=generated_at,
        tables=tables,
        charts=charts,
    )


def _owned_line(result: BuyRentResult) -> str:
    c = result.cost
    per = result.owned_per_gpu_hour
    per_txt = "n/a at 0% utilization" if per is None else f"${per:.2f} per busy GPU-hour"
    return (
        f"Owning: ${c.capex:,.0f} capex, ${c.total_yr(result.utilization):,.0f} per "
        f"year all-in = {per_txt}; capital is "
        f"{c.capital_yr / c.total_yr(result.utilization):.0%} of it."
    )
