"""Input parsing: percentages, ranges, config then flags, one-line errors."""

from __future__ import annotations

import pytest

from cloudgpu.costs.defaults import parse_value, resolve_inputs
from cloudgpu.errors import ConfigError


def test_percent_and_fraction() -> None:
    assert parse_value("utilization", "60%", "--utilization") == pytest.approx(0.6)
    assert parse_value("utilization", "0.6", "--utilization") == pytest.approx(0.6)
    assert parse_value("utilization", 1, "--utilization") == 1.0
    assert parse_value("server_price", "$310,000", "--server-price") == 310_000


@pytest.mark.parametrize(
    ("key", "raw", "message"),
    [
        ("utilization", "150%", "expected 0-100%"),
        ("utilization", "60", "expected 0-100%"),
        ("utilization", "-5%", "expected 0-100%"),
        ("years", "0", "greater than 0"),
        ("years", "-2", "greater than 0"),
        ("electricity", "-0.1", "negative"),
        ("pue", "0.9", "at least 1.0"),
        ("pue", "130%", "percentage"),
        ("years", "nan", "finite"),
        ("years", "four", "expected a number"),
        ("bogus", "1", "unknown buy-vs-rent input"),
    ],
)
def test_bad_values(key: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_value(key, raw, "--" + key)
    assert "\n" not in str(info.value)


def test_config_then_flags() -> None:
    inputs = resolve_inputs({"pue": 1.5, "electricity": 0.12}, {"pue": "1.2", "years": None})
    assert inputs.pue == 1.2  # the flag wins
    assert inputs.electricity == 0.12  # config beats the default
    assert inputs.years == 4.0  # None means not given


def test_config_error_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"config.toml: buy_vs_rent.residual"):
        resolve_inputs({"residual": 2}, {})
    with pytest.raises(ConfigError, match="idle_draw"):
        resolve_inputs({}, {"idle_draw": 0.9, "load_draw": 0.5})
