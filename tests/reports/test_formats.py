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
from cloudgpu.reports.render import cell_text, render, to_csv
from tests.costs.helpers import REFERENCE_OFFERS
from tests.reports.samples import (
    buyrent_sample,
    crowded_offers_sample,
    offers_sample,
    plan_sample,
    spend_sample,
)


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
    "plan": plan_sample,
    "offers-with-flags": crowded_offers_sample,
}


class _Tables(HTMLParser):
    """Cell text of every <table id="table-..."> in an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._current: str | None = None
        self._cell: list[str] | None = None
        self._in_flag = False
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "span" and dict(attrs).get("class") == "flag" and self._cell is not None:
            self._cell.append("\x00")
            self._in_flag = True
        if tag == "table":
            self._current = str(dict(attrs)["id"]).removeprefix("table-")
            self.tables[self._current] = []
        elif tag == "tr" and self._current:
            self.tables[self._current].append([])
        elif tag in ("td", "th") and self._current:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._in_flag and self._cell is not None:
            self._cell.append("\x00")
            self._in_flag = False
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


def csv_tables(report: Report) -> dict[str, list[list[str]]]:
    """One CSV per table (as `report --format csv` writes them), parsed back."""
    return {t.id: list(csv.reader(io.StringIO(to_csv(t)))) for t in report.tables}


def _plain(cells: list[str]) -> list[str]:
    """HTML cell text with each flag badge written as the text formats write it."""
    return [re.sub(r"\x00([^\x00]*)\x00", r" [\1]", c) for c in cells]


@pytest.mark.parametrize("name", list(SAMPLES))
def test_all_formats_carry_the_same_numbers(name: str) -> None:
    report = SAMPLES[name]()
    data = json.loads(render(report, "json"))
    parser = _Tables()
    parser.feed(render(report, "html"))
    md = md_tables(render(report, "md"))
    csv_t = csv_tables(report)
    assert set(parser.tables) == set(data["tables"]) == set(csv_t)
    for tid, table in data["tables"].items():
        cols = table["columns"]
        # What a reader sees: attached columns (a price's flags) sit inside the cell
        # before them, in the HTML and Markdown alike; CSV and JSON keep every column.
        shown = report.table(tid).shown()
        expected = [[cell_text(row, c, a) for c, a in shown] for row in table["rows"]]
        html_rows = [[cell.replace("\u00a0", " ") for cell in r] for r in parser.tables[tid]]
        assert html_rows[0] == [c.title for c, _ in shown]
        assert [_plain(r) for r in html_rows[1:]] == expected, tid
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
    texts = [render(report, fmt) for fmt in ("html", "md", "json")]
    texts += [to_csv(t) for t in report.tables]
    for text in texts:
        assert not re.search(r"\b(nan|NaN|inf|Infinity)\b", text)


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
    # No attribute holds a URL but the SVG namespace name, which is never fetched (a
    # source cited as text, such as a provider's documentation page, is not a request).
    urls = {v for _, attrs in parser.tags for v in attrs.values() if v and "://" in v}
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


def test_spend_headline_matches_the_table_and_names_no_local_path() -> None:
    from cloudgpu.costs.spend import summarize
    from cloudgpu.reports.spend import spend_report
    from tests.costs.helpers import spend

    tiny = [spend("i-1", "blip", gpu_count=1, price_per_hour=1.2, hours=1 / 60)]
    report = spend_report(summarize(tiny, None, now=tiny[0].ended_at + 60), "now")
    total = report.table("total").rows[0]
    shown = format_cell(total["gpu_hours"], "num")
    assert shown == "0.02" and f"({shown} GPU-hours)" in report.summary[0]
    assert format_cell(total["cost"], "cents") in report.summary[0]
    assert "/" not in report.source and ".db" not in report.source
