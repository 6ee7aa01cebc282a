"""Total cost of owning GPU servers, per year and per GPU-hour (REFERENCE.md section 6).

    capex        = server_price * (1 + infra_uplift)
    CRF          = r(1+r)^n / ((1+r)^n - 1)             (1/n when r = 0)
    capital_yr   = (capex - residual/(1+r)^n) * CRF
    power_yr     = kW_max * (idle + u*(load - idle)) * PUE * 8760 * $/kWh
    colo_yr      = $/kW-month * kW_contracted * 12
    opex_yr      = power_yr + colo_yr + maintenance * capex + staff_yr / servers
    owned $/GPUh = (capital_yr + opex_yr) / (gpus * 8760 * u)

Pure arithmetic on numbers already validated by cloudgpu.costs.defaults: no catalog, no
files, no printing. Results that would be infinite (0% utilization) are None, so no
report ever shows a NaN or inf.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudgpu.costs.defaults import TcoInputs
from cloudgpu.errors import ConfigError

HOURS_PER_YEAR = 8760.0
MONTHS_PER_YEAR = 12


@dataclass(frozen=True)
class Hardware:
    """One server: how many GPUs, what it costs to buy, and its maximum draw."""

    gpu: str
    gpus: int
    server_price: float
    kw_max: float


def hardware_for(
    gpu: str, count: int, purchase_usd: float | None, tdp_w: float | None, inputs: TcoInputs
) -> Hardware:
    """The server priced from the GPU's purchase price and TDP unless the inputs say."""
    if count <= 0:
        raise ConfigError(f"--count: expected a positive number of GPUs, got {count}")
    price = inputs.server_price
    if price is None:
        if not purchase_usd:
            raise ConfigError(
                f"{gpu}: no purchase price known for this GPU; give --server-price USD",
                hint=f"the price in USD of one whole {count}x {gpu} server with its GPUs",
            )
        price = purchase_usd * count * (1.0 + inputs.server_uplift)
    kw = inputs.kw_max
    if kw is None:
        if not tdp_w:
            raise ConfigError(f"{gpu}: no TDP known for it", hint="give --kw-max KW")
        kw = tdp_w * count * inputs.node_power_factor / 1000.0
    return Hardware(gpu=gpu, gpus=count, server_price=price, kw_max=kw)


def capital_recovery_factor(rate: float, years: float) -> float:
    """The share of a loan repaid each year so it is paid off with interest after n years."""
    if years <= 0:
        raise ConfigError(f"--years: must be greater than 0, got {years:g}")
    if rate == 0:
        return 1.0 / years
    growth = (1.0 + rate) ** years
    return rate * growth / (growth - 1.0)


@dataclass(frozen=True)
class OwnedCost:
    """Yearly cost of one owned server, split into what drives it."""

    hw: Hardware
    inputs: TcoInputs
    capex: float
    crf: float
    residual_pv: float  # resale value at the horizon, discounted to today
    capital_yr: float
    power_idle_yr: float  # power bill at 0% utilization
    power_span_yr: float  # added power bill going from 0% to 100%
    colo_yr: float
    maintenance_yr: float
    staff_yr: float

    @property
    def fixed_yr(self) -> float:
        """Everything that does not depend on utilization."""
        return (
            self.capital_yr
            + self.power_idle_yr
            + self.colo_yr
            + self.maintenance_yr
            + self.staff_yr
        )

    def power_yr(self, u: float) -> float:
        return self.power_idle_yr + u * self.power_span_yr

    def total_yr(self, u: float) -> float:
        return self.fixed_yr + u * self.power_span_yr

    def opex_yr(self, u: float) -> float:
        return self.total_yr(u) - self.capital_yr

    def gpu_hours_yr(self, u: float) -> float:
        return self.hw.gpus * HOURS_PER_YEAR * u

    def per_gpu_hour(self, u: float) -> float | None:
        """Owned USD per busy GPU-hour; None at 0% (no busy hours to spread cost over)."""
        hours = self.gpu_hours_yr(u)
        return self.total_yr(u) / hours if hours > 0 else None


def owned_cost(hw: Hardware, inputs: TcoInputs) -> OwnedCost:
    """The yearly cost of owning ``hw`` under ``inputs``."""
    r, n = inputs.cost_of_capital, inputs.years
    crf = capital_recovery_factor(r, n)
    capex = hw.server_price * (1.0 + inputs.infra_uplift)
    # Residual is a share of the server price (not capex): uplift (install, cabling) has
    # no resale value. This is what reproduces REFERENCE.md's worked example (~$150k/yr).
    residual_pv = inputs.residual * hw.server_price / (1.0 + r) ** n
    energy = inputs.pue * HOURS_PER_YEAR * inputs.electricity * hw.kw_max
    return OwnedCost(
        hw=hw,
        inputs=inputs,
        capex=capex,
        crf=crf,
        residual_pv=residual_pv,
        capital_yr=(capex - residual_pv) * crf,
        power_idle_yr=energy * inputs.idle_draw,
        power_span_yr=energy * (inputs.load_draw - inputs.idle_draw),
        colo_yr=inputs.colocation * hw.kw_max * MONTHS_PER_YEAR,
        maintenance_yr=inputs.maintenance * capex,
        staff_yr=inputs.staff_per_year / inputs.servers_per_staff,
    )


def breakeven_utilization(
    cost: OwnedCost, rent_per_gpu_hour: float, rent_fixed_yr: float = 0.0
) -> float | None:
    """The utilization at which owning costs the same as renting the same busy hours.

    Solves fixed + u*span = gpus*8760*u*rent + rent_fixed for u, so the owned $/GPU-hour
    at the answer equals the rent price exactly (REFERENCE.md's shorthand divides the
    100%-utilization cost by rent revenue, which reads ~1 point higher). 0.0 means owning
    is cheaper at any utilization; None means renting is cheaper even at 100%.
    """
    margin = cost.hw.gpus * HOURS_PER_YEAR * rent_per_gpu_hour - cost.power_span_yr
    gap = cost.fixed_yr - rent_fixed_yr
    if gap <= 0:
        return 0.0
    if margin <= 0:
        return None
    u = gap / margin
    return u if u <= 1.0 else None


def payback_months(
    cost: OwnedCost, u: float, rent_per_gpu_hour: float, rent_fixed_yr: float = 0.0
) -> float | None:
    """Months until buying (capex up front, then opex) has cost less than renting.

    A cash view: no discounting and no resale, as a finance team reads "payback". None
    when renting costs less per month than running the owned server, so it never pays
    back.
    """
    rent_month = (cost.gpu_hours_yr(u) * rent_per_gpu_hour + rent_fixed_yr) / MONTHS_PER_YEAR
    opex_month = cost.opex_yr(u) / MONTHS_PER_YEAR
    saving = rent_month - opex_month
    if saving <= 0:
        return None
    return cost.capex / saving


def owned_cumulative(cost: OwnedCost, u: float, months: int) -> list[float]:
    """Cash spent on the owned server by the end of each month 0..months."""
    per_month = cost.opex_yr(u) / MONTHS_PER_YEAR
    return [cost.capex + per_month * m for m in range(months + 1)]


def rent_cumulative(
    gpus: int, u: float, rent_per_gpu_hour: float, rent_fixed_yr: float, months: int
) -> list[float]:
    """Cash spent renting the same busy GPU-hours by the end of each month 0..months."""
    per_month = (gpus * HOURS_PER_YEAR * u * rent_per_gpu_hour + rent_fixed_yr) / 12
    return [per_month * m for m in range(months + 1)]
