"""Buy versus rent: the owned cost set against every rent option, with a verdict.

Combines cloudgpu.costs.tco (owning) with cloudgpu.costs.rent (renting) into one result
that the CLI prints and the reports render: break-even utilization and payback per rent
option, cumulative cost lines over the horizon, and sensitivity tables. It prints
nothing and loads nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cloudgpu.catalog.offer import FLAG_PRICE_PREDATES_CUT
from cloudgpu.costs.defaults import DEFAULTS, SOURCES_DATE, TcoInputs
from cloudgpu.costs.rent import RentOption
from cloudgpu.costs.tco import (
    MONTHS_PER_YEAR,
    Hardware,
    OwnedCost,
    breakeven_utilization,
    owned_cost,
    owned_cumulative,
    payback_months,
    rent_cumulative,
)

SENSITIVITY_UTILIZATION = (0.2, 0.4, 0.6, 0.8, 1.0)
SENSITIVITY_YEARS = (3.0, 4.0, 5.0, 6.0)
SENSITIVITY_ELECTRICITY = (0.05, 0.08, 0.12, 0.20)
SENSITIVITY_PUE = (1.1, 1.3, 1.5, 1.8)


@dataclass(frozen=True)
class OptionResult:
    option: RentOption
    breakeven_utilization: float | None  # None: renting is cheaper even at 100%
    payback_months: float | None  # None: never pays back at this utilization
    rent_cost_yr: float  # renting the same busy hours for a year

    def to_dict(self) -> dict[str, Any]:
        o = self.option
        return {
            "provider": o.provider,
            "market": o.market,
            "instance_type": o.instance_type,
            "region": o.region,
            "price_per_gpu_hour": _r(o.price_per_gpu_hour),
            "effective_per_gpu_hour": _r(o.effective_per_gpu_hour),
            "breakeven_utilization": _r(self.breakeven_utilization),
            "payback_months": _r(self.payback_months, 1),
            "rent_cost_per_year": _r(self.rent_cost_yr, 0),
            "price_source": o.price_source,
            "observed_at": o.observed_at,
            "flags": list(o.flags),
        }


@dataclass(frozen=True)
class Sensitivity:
    """Owned $/GPU-hour over a grid: rows x columns."""

    row_name: str
    col_name: str
    rows: tuple[float, ...]
    cols: tuple[float, ...]
    values: tuple[tuple[float | None, ...], ...]


@dataclass(frozen=True)
class BuyRentResult:
    cost: OwnedCost
    utilization: float
    options: list[OptionResult]
    sensitivities: list[Sensitivity] = field(default_factory=list)

    @property
    def inputs(self) -> TcoInputs:
        return self.cost.inputs

    @property
    def owned_per_gpu_hour(self) -> float | None:
        return self.cost.per_gpu_hour(self.utilization)

    @property
    def months(self) -> int:
        return max(1, math.ceil(self.inputs.years * MONTHS_PER_YEAR))

    def cheapest(self) -> OptionResult:
        return min(self.options, key=lambda r: r.option.effective_per_gpu_hour)

    def primary(self) -> OptionResult:
        """The cheapest option that cannot be reclaimed (spot only when nothing else)."""
        steady = [r for r in self.options if r.option.market != "spot"]
        return min(steady or self.options, key=lambda r: r.option.effective_per_gpu_hour)

    def verdict(self, caveats: bool = True) -> str:
        """The answer in one or two sentences; ``caveats`` appends the notes on prices
        known to be out of date (:func:`price_caveats`)."""
        text = verdict_text(self)
        return text + "".join(f" {c}" for c in price_caveats(self)) if caveats else text

    def cumulative(self) -> dict[str, list[float]]:
        """Cash spent by month for owning and for each rent option."""
        u, m = self.utilization, self.months
        lines = {"own": owned_cumulative(self.cost, u, m)}
        for r in self.options:
            o = r.option
            lines[o.label] = rent_cumulative(
                self.cost.hw.gpus, u, o.effective_per_gpu_hour, o.fixed_per_year, m
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        c = self.cost
        return {
            "gpu": c.hw.gpu,
            "count": c.hw.gpus,
            "utilization": _r(self.utilization),
            "years": self.inputs.years,
            "verdict": self.verdict(),
            "owned_per_gpu_hour": _r(self.owned_per_gpu_hour),
            "owned": owned_breakdown(c, self.utilization),
            "rent_options": [r.to_dict() for r in self.options],
            "sensitivity": [sensitivity_dict(s) for s in self.sensitivities],
            "inputs": inputs_table(self.inputs),
            "sources_date": SOURCES_DATE,
        }


def _r(value: float | None, digits: int = 4) -> float | None:
    """Round for output; None (and never NaN/inf) for an undefined number."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def owned_breakdown(c: OwnedCost, u: float) -> dict[str, float | None]:
    return {
        "server_price": _r(c.hw.server_price, 0),
        "capex": _r(c.capex, 0),
        "kw_max": _r(c.hw.kw_max, 2),
        "capital_recovery_factor": _r(c.crf),
        "residual_present_value": _r(c.residual_pv, 0),
        "capital_per_year": _r(c.capital_yr, 0),
        "power_per_year": _r(c.power_yr(u), 0),
        "colocation_per_year": _r(c.colo_yr, 0),
        "maintenance_per_year": _r(c.maintenance_yr, 0),
        "staff_per_year": _r(c.staff_yr, 0),
        "total_per_year": _r(c.total_yr(u), 0),
    }


def inputs_table(inputs: TcoInputs) -> list[dict[str, Any]]:
    """Every input with its value, unit, and where the default came from."""
    rows = []
    for d in DEFAULTS:
        value = getattr(inputs, d.key)
        rows.append(
            {
                "key": d.key,
                "value": value,
                "default": d.value,
                "unit": d.unit,
                "source": d.source if value == d.value else "given",
            }
        )
    return rows


def sensitivity_dict(s: Sensitivity) -> dict[str, Any]:
    return {
        "rows": s.row_name,
        "columns": s.col_name,
        "row_values": list(s.rows),
        "column_values": list(s.cols),
        "owned_per_gpu_hour": [[_r(v) for v in row] for row in s.values],
    }


def analyse(hw: Hardware, inputs: TcoInputs, options: list[RentOption]) -> BuyRentResult:
    """The full comparison at ``inputs.utilization``."""
    cost = owned_cost(hw, inputs)
    u = inputs.utilization
    results = [
        OptionResult(
            option=o,
            breakeven_utilization=breakeven_utilization(
                cost, o.effective_per_gpu_hour, o.fixed_per_year
            ),
            payback_months=payback_months(cost, u, o.effective_per_gpu_hour, o.fixed_per_year),
            rent_cost_yr=cost.gpu_hours_yr(u) * o.effective_per_gpu_hour + o.fixed_per_year,
        )
        for o in options
    ]
    return BuyRentResult(cost, u, results, sensitivity_tables(hw, inputs))


def sensitivity_tables(hw: Hardware, inputs: TcoInputs) -> list[Sensitivity]:
    u = inputs.utilization
    by_years = tuple(
        tuple(
            owned_cost(hw, inputs.with_values(years=y)).per_gpu_hour(util)
            for y in SENSITIVITY_YEARS
        )
        for util in SENSITIVITY_UTILIZATION
    )
    by_power = tuple(
        tuple(
            owned_cost(hw, inputs.with_values(electricity=e, pue=p)).per_gpu_hour(u)
            for p in SENSITIVITY_PUE
        )
        for e in SENSITIVITY_ELECTRICITY
    )
    return [
        Sensitivity("utilization", "years", SENSITIVITY_UTILIZATION, SENSITIVITY_YEARS, by_years),
        Sensitivity(
            "electricity_usd_kwh", "pue", SENSITIVITY_ELECTRICITY, SENSITIVITY_PUE, by_power
        ),
    ]


def pct(value: float | None) -> str:
    return "never" if value is None else f"{value * 100:.0f}%"


def _where(o: RentOption) -> str:
    return f"{o.provider} ({o.market.replace('_', '-')}, ${o.effective_per_gpu_hour:.2f}/GPU-h)"


def verdict_text(result: BuyRentResult) -> str:
    """One sentence first, as a person would say it; the tables follow.

    Judged against the cheapest option that is not spot: spot capacity can be taken
    back, which owned hardware cannot, so it gets its own sentence when cheaper.
    """
    best = result.primary()
    where = _where(best.option)
    u = result.utilization
    owned = result.owned_per_gpu_hour
    owned_txt = "nothing is used" if owned is None else f"owning costs ${owned:.2f}/GPU-h"
    be = best.breakeven_utilization
    if be is None:
        head = f"Renting on {where} is cheaper at any utilization up to 100%"
    elif be == 0.0:
        head = f"Owning is cheaper than renting on {where} at any utilization"
    else:
        head = f"Renting on {where} is cheaper below {pct(be)} utilization"
    choice = "rent" if be is None or u < be else "buy"
    text = f"{head}; at {pct(u)} {owned_txt}, so {choice}."
    spot = result.cheapest()
    if spot is not best:
        sb = spot.breakeven_utilization
        beats = "owning never beats it" if sb is None else f"owning beats it above {pct(sb)}"
        text += (
            f" Spot on {_where(spot.option)} is cheaper still if your work survives "
            f"interruptions ({beats})."
        )
    return text


def price_caveats(result: BuyRentResult) -> list[str]:
    """A sentence for each option whose price predates a published price cut and would
    make buying look good: its break-even and payback rest on a price nobody pays now."""
    out = []
    for r in result.options:
        if FLAG_PRICE_PREDATES_CUT not in r.option.flags or r.payback_months is None:
            continue
        o = r.option
        out.append(
            f"Note: {o.label}'s ${o.price_per_gpu_hour:.2f}/GPU-h predates a published "
            f"price cut (today's price is lower), so its {pct(r.breakeven_utilization)} "
            f"break-even and {r.payback_months:.1f}-month payback flatter buying; "
            f"`cloudgpu catalog refresh --provider {o.provider}` fetches current prices."
        )
    return out
