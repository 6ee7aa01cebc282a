"""HTML, Markdown, CSV and JSON of one report carry the same numbers; the HTML is
self-contained and prints; nothing renders a NaN."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser

import pytest

from cloudgpu.costs import TcoInputs, analyse, hardware_for, rent_options
from cloudgpu.reports.buyrent import buyrent_report
from cloudgpu.reports.model import Report, format_cell
from cloudgpu.reports.render import render
from tests.costs.helpers import REFERENCE_OFFERS
from tests.reports.samples import buyrent_sample, offers_sample, spend_sample


def zero_utilization_sample() -> Report:
    inputs = TcoInputs(utilization=0.0, residual=0.0, cost_of_capital=0.0)
    hw = hardware_for("H100-SXM", 8, 30000.0, 700.0, inputs)
    result = analyse(hw, inputs, rent_options(REFERENCE_OFFERS, "H100-SXM", 8, inputs))
    return buyrent_report(result, "test", "2026-11-30", "now")


SAMPLES: dict[str, Callable[[], Report]] = {
    "buy-vs-rent": buyrent_sample,
    "offers": offers_sample,
    "spend": spend_sample,
    "zero-utilization": zero_utilization_sample,
}


class _Tables(HTMLParser):
    """Cell text of every <table id="table-..."> in an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._current: str | None = None
        self._cell: list[str] | None = None
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self._current = str(dict(attrs)["id"]).removeprefix("table-")
            self.tables[self._current] = []
        elif tag == "tr" and self._current:
            self.tables[self._current].append([])
        elif tag in ("td", "th") and self._current:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._current and self._cell is not None:
            self.tables[self._current][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def md_tables(text: str) -> dict[str, list[list[str]]]:
    tables: dict[str, list[list[str]]] = {}
    title = ""
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:]
            tables[title] = []
        elif line.startswith("| ") and title:
            cells = re.split(r"(?<!\\) \| ", line[2:-2])
            tables[title].append([c.replace("\\|", "|") for c in cells])
    return tables


def csv_tables(text: str) -> dict[str, list[list[str]]]:
    tables: dict[str, list[list[str]]] = {}
    current = None
    for row in csv.reader(io.StringIO(text)):
        if row and row[0].startswith("## "):
            current = row[0][3:]
            tables[current] = []
        elif row and current:
            tables[current].append(row)
        elif not row:
            current = None
    return tables


@pytest.mark.parametrize("name", list(SAMPLES))
def test_all_formats_carry_the_same_numbers(name: str) -> None:
    report = SAMPLES[name]()
    data = json.loads(render(report, "json"))
    parser = _Tables()
    parser.feed(render(report, "html"))
    md = md_tables(render(report, "md"))
    csv_t = csv_tables(render(report, "csv"))
    assert set(parser.tables) == set(data["tables"]) == set(csv_t)
    for tid, table in data["tables"].items():
        cols = table["columns"]
        expected = [[format_cell(row[c["key"]], c["kind"]) for c in cols] for row in table["rows"]]
        assert parser.tables[tid][0] == [c["title"] for c in cols]
        assert parser.tables[tid][1:] == expected, tid
        assert md[table["title"]][1:] == expected, tid  # row 0 is the header
        assert csv_t[tid][0] == [c["key"] for c in cols]
        for csv_row, row in zip(csv_t[tid][1:], table["rows"], strict=True):
            for cell, c in zip(csv_row, cols, strict=True):
                value = row[c["key"]]
                if value is None:
                    assert cell == ""
                elif isinstance(value, str):
                    assert cell == value
                else:
                    assert float(cell) == value


@pytest.mark.parametrize("name", list(SAMPLES))
def test_no_nan_or_inf_anywhere(name: str) -> None:
    report = SAMPLES[name]()
    for fmt in ("html", "md", "csv", "json"):
        text = render(report, fmt)
        assert not re.search(r"\b(nan|NaN|inf|Infinity)\b", text), fmt


@pytest.mark.parametrize("name", list(SAMPLES))
def test_html_is_self_contained_and_prints(name: str) -> None:
    report = SAMPLES[name]()
    html = render(report, "html")
    parser = _Tables()
    parser.feed(html)
    for tag, attrs in parser.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed", "img"), tag
        for attr in ("src", "href", "data"):
            assert attrs.get(attr) is None, (tag, attr)
    # The only URL is the SVG namespace name, which is never fetched.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert "@import" not in html and "url(" not in html
    assert "@media print" in html
    assert "default-src 'none'" in html
    assert report.source in html and report.data_date in html
    assert html.count("<svg") == len(report.charts)


def test_buyrent_charts_mark_break_even() -> None:
    report = buyrent_sample()
    chart = next(c for c in report.charts if c.id == "cumulative")
    labels = [m[2] for m in chart.marks]
    assert "aws on-demand: 18 mo" in labels
    html = render(report, "html")
    assert "aws on-demand: 18 mo" in html
    assert "Renting on runpod (on-demand, $3.99/GPU-h) is cheaper below 53%" in html


def test_empty_chart_says_so() -> None:
    report = offers_sample()
    report.table("value").rows = []
    assert "no data to plot" in render(report, "html")
