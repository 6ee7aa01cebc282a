"""The inputs of the buy-versus-rent model: every default with its source, and parsing.

Each input has a default with its source written next to it in words a reader can
look up (a public survey or price list), or says plainly that it is an assumption; a
``[buy_vs_rent]`` config key and a ``--flag`` of the same name (dashes for
underscores). This module validates values and says which are wrong in one line; it
does no cost arithmetic (cloudgpu.costs.tco) and reads no files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from cloudgpu.errors import ConfigError

SOURCES_DATE = "2026-11-30"  # when these defaults were copied from their sources

# Kinds decide validation: fraction (0..1, "60%" accepted), share (>= 0, "%" accepted,
# may exceed 1), positive (> 0), nonneg (>= 0), pue (>= 1), optional_* (None = derive).
_KINDS = ("fraction", "share", "positive", "nonneg", "pue", "optional_usd", "optional_kw")


@dataclass(frozen=True)
class Default:
    key: str
    value: float | None
    kind: str
    unit: str
    source: str


DEFAULTS: tuple[Default, ...] = (
    Default(
        "utilization",
        0.6,
        "fraction",
        "share of hours busy",
        "assumption (no public source): set your own with --utilization",
    ),
    Default(
        "years",
        4.0,
        "positive",
        "years",
        "assumption: GPU servers are commonly depreciated over 3-6 years",
    ),
    Default(
        "server_price",
        None,
        "optional_usd",
        "USD per server",
        "GPU purchase price x count x (1 + server_uplift) unless given",
    ),
    Default(
        "server_uplift",
        70000 / 240000,
        "share",
        "of GPU cost",
        "street prices 2024-2026: 8xH100 HGX server with InfiniBand ~$310k vs 8 x $30k GPUs",
    ),
    Default(
        "infra_uplift",
        0.15,
        "share",
        "of server price",
        "assumption: ~15% on top for network, storage and installation",
    ),
    Default(
        "residual",
        0.20,
        "fraction",
        "of server price after the horizon",
        "assumption: 20% resale value at the end of the horizon",
    ),
    Default("cost_of_capital", 0.10, "share", "per year", "assumption: 10% a year cost of capital"),
    Default(
        "kw_max",
        None,
        "optional_kw",
        "kW per server",
        "GPU TDP x count x node_power_factor unless given",
    ),
    Default(
        "node_power_factor",
        10.2 / 5.6,
        "positive",
        "server kW / GPU TDP sum",
        "NVIDIA DGX H100 datasheet: 10.2 kW max vs 8 x 700 W GPU TDP",
    ),
    Default("idle_draw", 0.2, "fraction", "of kW max when idle", "assumption: 20% of max"),
    Default("load_draw", 0.8, "fraction", "of kW max under load", "assumption: 80% of max"),
    Default(
        "pue",
        1.3,
        "pue",
        "facility / IT power",
        "1.3; hyperscale 1.1-1.2, enterprise 1.5-1.8 (Uptime Institute Global Data Center Survey)",
    ),
    Default(
        "electricity",
        0.08,
        "nonneg",
        "USD per kWh",
        "US industrial average (U.S. EIA, Electric Power Monthly)",
    ),
    Default(
        "colocation",
        184.0,
        "nonneg",
        "USD per kW-month",
        "North America colocation (CBRE, North America Data Center Trends H2 2024)",
    ),
    Default("maintenance", 0.05, "share", "of capex per year", "assumption: 5% of capex a year"),
    Default(
        "staff_per_year",
        200000.0,
        "nonneg",
        "USD per year per team",
        "assumption: one ~$200k engineer-year per 64 servers",
    ),
    Default(
        "servers_per_staff", 64.0, "positive", "servers per team", "assumption (see staff_per_year)"
    ),
    Default(
        "commit_discount",
        0.0,
        "fraction",
        "off on-demand",
        "off unless given: committed-use terms vary by provider and term",
    ),
    Default(
        "storage_month",
        0.0,
        "nonneg",
        "USD per month",
        "renter overhead, explicit input (0 compares list prices)",
    ),
    Default(
        "egress_month",
        0.0,
        "nonneg",
        "USD per month",
        "renter overhead, explicit input (0 compares list prices)",
    ),
    Default(
        "idle_fraction",
        0.0,
        "fraction",
        "of rented hours paid but idle",
        "renter overhead (setup, waiting), explicit input",
    ),
    Default(
        "failed_fraction",
        0.0,
        "fraction",
        "of rented hours lost to failed runs",
        "renter overhead (goodput, as SemiAnalysis counts it), explicit input",
    ),
)
DEFAULTS_BY_KEY: dict[str, Default] = {d.key: d for d in DEFAULTS}


@dataclass(frozen=True)
class TcoInputs:
    """Every number the model uses; build with :func:`resolve_inputs`."""

    utilization: float = 0.6
    years: float = 4.0
    server_price: float | None = None
    server_uplift: float = 70000 / 240000
    infra_uplift: float = 0.15
    residual: float = 0.20
    cost_of_capital: float = 0.10
    kw_max: float | None = None
    node_power_factor: float = 10.2 / 5.6
    idle_draw: float = 0.2
    load_draw: float = 0.8
    pue: float = 1.3
    electricity: float = 0.08
    colocation: float = 184.0
    maintenance: float = 0.05
    staff_per_year: float = 200000.0
    servers_per_staff: float = 64.0
    commit_discount: float = 0.0
    storage_month: float = 0.0
    egress_month: float = 0.0
    idle_fraction: float = 0.0
    failed_fraction: float = 0.0

    def with_values(self, **values: Any) -> TcoInputs:
        return replace(self, **values)


def parse_value(key: str, raw: Any, origin: str) -> float | None:
    """Parse one input (number, or "60%" for shares) and check its range.

    ``origin`` names where it came from ("--utilization", "config.toml: buy_vs_rent.pue")
    so the one-line error points at it.
    """
    spec = DEFAULTS_BY_KEY.get(key)
    if spec is None:
        raise ConfigError(
            f"{origin}: unknown buy-vs-rent input {key!r}",
            hint="known: " + ", ".join(DEFAULTS_BY_KEY),
        )
    if raw is None and spec.kind.startswith("optional"):
        return None
    value = _number(raw, spec.kind, origin)
    _check_range(value, spec, origin)
    return value


def _number(raw: Any, kind: str, origin: str) -> float:
    percent = False
    if isinstance(raw, str):
        text = raw.strip().replace(",", "").replace("$", "")
        percent = text.endswith("%")
        text = text.rstrip("%").strip()
    elif isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(f"{origin}: expected a number, got {raw!r}")
    else:
        text = str(raw)
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{origin}: expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{origin}: expected a finite number, got {raw!r}")
    if percent:
        if kind not in ("fraction", "share"):
            raise ConfigError(f"{origin}: a percentage makes no sense here, got {raw!r}")
        value /= 100.0
    return value


def _check_range(value: float, spec: Default, origin: str) -> None:
    kind = spec.kind
    if kind == "fraction" and not 0.0 <= value <= 1.0:
        raise ConfigError(
            f"{origin}: expected 0-100% (a fraction 0-1 or e.g. 60%), got {_show(value, kind)}"
        )
    if kind in ("share", "nonneg") and value < 0:
        raise ConfigError(f"{origin}: must not be negative, got {value:g}")
    if kind in ("positive", "optional_usd", "optional_kw") and value <= 0:
        raise ConfigError(f"{origin}: must be greater than 0, got {value:g}")
    if kind == "pue" and value < 1.0:
        raise ConfigError(f"{origin}: PUE is facility over IT power, at least 1.0, got {value:g}")


def _show(value: float, kind: str) -> str:
    return f"{value * 100:g}%" if kind == "fraction" else f"{value:g}"


def resolve_inputs(
    config_section: Mapping[str, Any],
    overrides: Mapping[str, Any],
    config_origin: str = "config.toml",
) -> TcoInputs:
    """Defaults, then the ``[buy_vs_rent]`` config table, then command-line values."""
    values: dict[str, float | None] = {}
    for key, raw in config_section.items():
        values[key] = parse_value(key, raw, f"{config_origin}: buy_vs_rent.{key}")
    for key, raw in overrides.items():
        if raw is not None:
            values[key] = parse_value(key, raw, "--" + key.replace("_", "-"))
    inputs = TcoInputs().with_values(**values)
    if inputs.idle_draw > inputs.load_draw:
        raise ConfigError(
            f"idle_draw ({inputs.idle_draw:g}) is above load_draw ({inputs.load_draw:g})",
            hint="idle and load draw are fractions of kW max; idle should be the lower",
        )
    return inputs


def input_keys() -> tuple[str, ...]:
    """The names every input is known by, in the order of :class:`TcoInputs`."""
    return tuple(f.name for f in fields(TcoInputs))
