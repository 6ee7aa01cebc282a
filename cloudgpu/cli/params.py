"""Command-line value types that check flags the way job and config files are checked:
numbers finite and in a sane range (click's FloatRange lets ``nan`` through), durations
in the one grammar of cloudgpu.spec.units. A bad value is click's usage error (exit 2)
naming the flag."""

from __future__ import annotations

from typing import Any

import click

from cloudgpu.spec.fields import number, shown
from cloudgpu.spec.units import parse_duration_s


class Number(click.ParamType):
    """A finite number within [lo, hi] (``lo_open``: above lo); whole with ``integer``."""

    def __init__(
        self, lo: float, hi: float, *, integer: bool = False, lo_open: bool = False
    ) -> None:
        self.name = "integer" if integer else "number"
        self.integer = integer
        self._value = number("", lo, hi, integer=integer, lo_open=lo_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                value = int(value) if self.integer else float(value)
            except ValueError:
                kind = "a whole number" if self.integer else "a number"
                self.fail(f"expected {kind}, got {shown(value)}", param, ctx)
        try:
            return self._value.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Duration(click.ParamType):
    """A duration like 10m, 6h, 1h30m (seconds), at most ``max_s``."""

    name = "duration"

    def __init__(self, max_s: float = 365 * 86400.0) -> None:
        self.max_s = max_s

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            seconds = parse_duration_s(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds > self.max_s:
            self.fail(f"expected at most {self.max_s / 86400:g}d, got {shown(value)}", param, ctx)
        return seconds


PRICE = Number(0, 10_000, lo_open=True)  # USD per instance-hour
