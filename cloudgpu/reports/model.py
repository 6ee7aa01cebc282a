"""The report document every renderer reads: tables, charts drawn from those tables, and
the source and date of the data.

A chart never holds numbers of its own: it names a table and the columns it plots, so
HTML, Markdown, CSV and JSON carry the same numbers by construction. Cell formatting
lives here too (:func:`format_cell`), so the HTML and Markdown show identical text. This
module knows nothing about costs or catalogs and writes no files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Column kinds: how a value is shown and how many digits the data files keep.
KINDS: dict[str, int] = {
    "text": 0,
    "int": 0,
    "usd": 4,  # $/hour and $/GPU-hour: shown with 2 (or 3 below $1) decimals
    "usd0": 2,  # totals: shown as whole dollars with thousands separators
    "cents": 2,  # spend: shown to the cent
    "pct": 4,  # fractions shown as percentages
    "num": 2,
    "value": 4,  # an input of mixed unit: shown as given, up to 4 significant decimals
    "months": 1,
}
MISSING = "n/a"


@dataclass(frozen=True)
class Column:
    """``attach``: shown inside the cell before it (a price's flags beside the price) in
    HTML, Markdown and text; CSV and JSON keep it as its own column."""

    key: str
    title: str
    kind: str = "text"
    attach: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown column kind {self.kind!r}")


@dataclass
class Table:
    id: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    note: str = ""

    def column(self, key: str) -> Column:
        return next(c for c in self.columns if c.key == key)

    def shown(self) -> list[tuple[Column, list[Column]]]:
        """The columns a reader sees, each with the attached columns it carries."""
        out: list[tuple[Column, list[Column]]] = []
        for c in self.columns:
            if c.attach and out:
                out[-1][1].append(c)
            else:
                out.append((c, []))
        return out

    def values(self, key: str) -> list[Any]:
        return [row.get(key) for row in self.rows]


@dataclass
class Chart:
    """A chart drawn from ``table``: kind is bars, stacked, scatter or lines.

    bars/stacked: ``x`` is the category column, ``series`` the value columns (or, with
    ``group``, one series per distinct value of that column). scatter: ``x``/``y``
    numeric columns, ``group`` colours points, ``label`` names them. lines: ``x`` is
    numeric and every ``series`` column a line; ``marks`` are (x, y, text) points to
    highlight, such as break-even crossings. ``x_title``/``y_title`` name the horizontal
    and vertical axes as drawn (for horizontal bars: values across, categories down),
    with the unit in the title.
    """

    id: str
    title: str
    kind: str
    table: str
    x: str
    series: list[str] = field(default_factory=list)
    y: str = ""
    group: str = ""
    label: str = ""
    x_title: str = ""
    y_title: str = ""
    marks: list[tuple[float, float, str]] = field(default_factory=list)
    caption: str = ""
    missing_text: str = "n/a"  # shown in a bar chart's row that has no value at all

    def __post_init__(self) -> None:
        # A chart a reader cannot decode is a bug: both axes are named, values with units.
        if not (self.x_title and self.y_title):
            raise ValueError(f"chart {self.id}: x_title and y_title are required")


@dataclass
class Report:
    title: str
    summary: list[str]
    source: str  # where the numbers come from
    data_date: str  # when they were observed
    generated_at: str
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    kind: str = ""  # offers | plan | spend | buy-vs-rent

    def table(self, table_id: str) -> Table:
        return next(t for t in self.tables if t.id == table_id)

    def charts_for(self, table_id: str) -> list[Chart]:
        return [c for c in self.charts if c.table == table_id]


def clean(value: Any, kind: str) -> Any:
    """The value as the data files carry it: rounded, and None for anything undefined."""
    if value is None:
        return None
    if kind == "text":
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if not math.isfinite(value):
        return None
    if kind == "int":
        return int(value)
    return round(float(value), KINDS[kind])


# How each numeric kind reads; any other kind: two decimals with thousands separators.
_FORMATS: dict[str, Callable[[Any], str]] = {
    "int": lambda v: f"{v:,d}",
    "usd": lambda v: f"${v:,.3f}" if abs(v) < 1 else f"${v:,.2f}",
    "usd0": lambda v: f"${v:,.0f}",
    "cents": lambda v: f"${v:,.2f}",
    "pct": lambda v: f"{v * 100:.1f}%",
    "value": lambda v: f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}",
    "months": lambda v: f"{v:.1f}",
}


def format_cell(value: Any, kind: str) -> str:
    """What a reader sees for ``value`` (already :func:`clean`-ed or raw)."""
    v = clean(value, kind)
    if v is None:
        return MISSING
    if kind in ("text",) or isinstance(v, str):
        return str(v)
    return _FORMATS.get(kind, lambda v: f"{v:,.2f}")(v)


def table_data(table: Table) -> list[dict[str, Any]]:
    """Rows with every value cleaned: what JSON and CSV carry."""
    return [{c.key: clean(row.get(c.key), c.kind) for c in table.columns} for row in table.rows]
