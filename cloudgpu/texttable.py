"""The one plain-text table renderer: aligned columns that fit the terminal.

Every table a command prints (offers, gpus, plan, status, text reports) goes through
:func:`render_table`. Given a width (the terminal's, from :func:`terminal_width`), it
narrows the widest text columns, cutting their cells with "…", until the table fits;
numbers are never cut (a shortened price would be a wrong price), and a table that
cannot fit even then is printed whole rather than mangled. Without a width (output to a
pipe or a file) nothing is cut. Pure string work: no I/O besides asking the terminal.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TextIO

GAP = "  "
MIN_WIDTH = 8  # a cut column keeps at least this many characters
ELLIPSIS = "…"


def terminal_width(stream: TextIO | None = None) -> int | None:
    """Columns of the terminal ``stream`` (default stdout) writes to, None when it is not a
    terminal (then tables are never cut). ``COLUMNS`` overrides, as in other tools."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    stream = stream or sys.stdout
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):  # closed or not a real stream
        return None
    return shutil.get_terminal_size().columns


def fit_widths(widths: Sequence[int], width: int | None, fixed: Collection[int] = ()) -> list[int]:
    """Column widths narrowed, widest text column first, until the row fits ``width``;
    ``fixed`` columns (numbers) keep theirs."""
    out = list(widths)
    if not width:
        return out
    budget = width - len(GAP) * max(0, len(out) - 1)
    while (over := sum(out) - budget) > 0:
        cuttable = [i for i, w in enumerate(out) if i not in fixed and w > MIN_WIDTH]
        if not cuttable:
            break  # cannot fit: print it whole
        widest = max(cuttable, key=lambda i: out[i])
        second = max((out[i] for i in cuttable if i != widest), default=MIN_WIDTH)
        # Down to the next widest column at most, so the cut is shared out evenly.
        out[widest] -= max(1, min(over, out[widest] - max(second, MIN_WIDTH)))
    return out


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Collection[int] = (),
    width: int | None = None,
    rule: bool = False,
    paint: Mapping[int, Callable[[str], str]] | None = None,
) -> list[str]:
    """Lines of an aligned table: ``right`` are the right-aligned (numeric, never cut)
    column indexes, ``width`` the room there is, ``rule`` a dashed line under the header,
    ``paint`` colours a column's body cells (after padding, so escapes do not count)."""
    paint = paint or {}
    natural = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    widths = fit_widths(natural, width, fixed=right)

    def line(cells: Sequence[str], body: bool = True) -> str:
        parts = []
        for i, (cell, w) in enumerate(zip(cells, widths, strict=True)):
            text = cell if i in right else cut(cell, w)
            text = text.rjust(w) if i in right else text.ljust(w)
            parts.append(paint[i](text) if body and i in paint else text)
        return GAP.join(parts).rstrip()

    out = [line(headers, body=False)]
    if rule:
        out.append(GAP.join("-" * w for w in widths))
    out += [line(r) for r in rows]
    return out
