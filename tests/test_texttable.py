"""The one table renderer: alignment, and fitting the terminal without cutting numbers."""

from __future__ import annotations

import io

import pytest

from cloudgpu.texttable import fit_widths, render_table, terminal_width

HEAD = ["PROVIDER", "INSTANCE", "REGION", "$/H"]
ROWS = [
    ["aws", "Standard_NCC40ads_H100_v5-long-name", "us-east-1", "55.04"],
    ["gcp", "a2-ultragpu-8g", "europe-west4-a-and-more", "1.00"],
]


def test_without_a_width_nothing_is_cut() -> None:
    lines = render_table(HEAD, ROWS, right={3}, rule=True)
    assert lines[0].split() == HEAD
    assert set(lines[1]) == {"-", " "}
    assert "Standard_NCC40ads_H100_v5-long-name" in lines[2]
    assert lines[2].endswith("55.04") and lines[3].endswith(" 1.00")  # right-aligned


@pytest.mark.parametrize("width", [40, 50, 60, 70])
def test_fits_the_width_and_never_cuts_numbers(width: int) -> None:
    lines = render_table(HEAD, ROWS, right={3}, width=width)
    assert all(len(line) <= width for line in lines)
    assert lines[1].endswith("55.04") and lines[2].endswith("1.00")
    assert "…" in lines[1]  # the long instance name gave way first


def test_a_table_that_cannot_fit_is_printed_whole() -> None:
    numbers = [["1234567890", "1234567890", "1234567890"]]
    lines = render_table(["A", "B", "C"], numbers, right={0, 1, 2}, width=10)
    assert lines[1] == "1234567890  1234567890  1234567890"


def test_widest_column_gives_way_first() -> None:
    assert fit_widths([30, 10, 5], 45, fixed={2}) == [26, 10, 5]
    assert fit_widths([30, 30], 42) == [20, 20]


def test_terminal_width_only_for_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_width(io.StringIO()) is None  # a pipe or a file: never cut
    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_width(io.StringIO()) == 72
