"""Charts as inline SVG text, drawn from a report table: no plotting library, no script,
nothing fetched, so the HTML report works offline and prints.

Four shapes cover the reports: horizontal grouped bars, vertical stacked bars, a scatter
and cumulative lines with marked points. Missing values are skipped, never drawn as NaN.
This module only produces markup; it does not decide what to plot (the report builders
do).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from cloudgpu.reports.model import Chart, Table, format_cell

# Okabe-Ito (its yellow swapped for Tol's wine, which shows on white paper): distinguishable
# with the common colour-vision deficiencies, and in print.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#882255", "#000000")
WIDTH = 760
LEGEND_ROW = 16
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t < hi + step * 0.999:
        ticks.append(round(t, 10))
        t += step
    return ticks


def tick_label(t: float, kind: str) -> str:
    """Axis text: as short as the tick allows ($2.5, $1,000, 20%), unlike table cells."""
    if kind == "pct":
        return f"{t * 100:.0f}%"
    text = f"{t:,.0f}" if float(t).is_integer() else f"{t:,.10g}"
    return f"${text}" if kind in ("usd", "usd0", "cents") else text


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def _legend(names: Sequence[str], y: float) -> str:
    """Colour keys in rows that wrap at the chart's width (see :func:`legend_rows`)."""
    parts = []
    for i, (x, row) in enumerate(_legend_layout(names)):
        yy = y + row * LEGEND_ROW
        parts.append(
            f'<rect x="{x:.0f}" y="{yy - 9:.0f}" width="10" height="10" '
            f'fill="{color(i)}"/><text x="{x + 14:.0f}" y="{yy:.0f}">'
            f"{escape(names[i])}</text>"
        )
    return "".join(parts)


def _legend_layout(names: Sequence[str]) -> list[tuple[float, int]]:
    out, x, row = [], 10.0, 0
    for name in names:
        w = 24 + 6.5 * len(name)
        if x + w > WIDTH and x > 10:
            x, row = 10.0, row + 1
        out.append((x, row))
        x += w
    return out


def legend_rows(names: Sequence[str]) -> int:
    layout = _legend_layout(names)
    return layout[-1][1] + 1 if layout else 1


def _shift(body: str, rows: int, height: float) -> tuple[str, float]:
    """Move a chart down to make room for extra legend rows."""
    extra = (rows - 1) * LEGEND_ROW
    if extra <= 0:
        return body, height
    return f'<g transform="translate(0 {extra})">{body}</g>', height + extra


def _svg(height: float, body: str, title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'width="100%" role="img" aria-label="{escape(title)}" {FONT}>'
        f"<title>{escape(title)}</title>{body}</svg>"
    )


def _framed(names: Sequence[str], height: float, out: list[str], title: str) -> str:
    body, h = _shift("".join(out), legend_rows(names), height)
    return _svg(h, _legend(names, 14) + body, title)


def _empty(title: str) -> str:
    return _svg(40, '<text x="10" y="24">no data to plot</text>', title)


def pivot(chart: Chart, table: Table) -> tuple[list[str], list[str], list[list[float | None]]]:
    """Categories, series names and values[category][series] for bar charts."""
    if chart.group:
        cats: list[str] = []
        names: list[str] = []
        cells: dict[tuple[str, str], float] = {}
        for row in table.rows:
            cat, name, val = (
                str(row.get(chart.x)),
                str(row.get(chart.group)),
                _num(row.get(chart.y)),
            )
            if cat not in cats:
                cats.append(cat)
            if name not in names:
                names.append(name)
            if val is not None:
                cells[(cat, name)] = cells.get((cat, name), 0.0) + val
        return cats, names, [[cells.get((c, n)) for n in names] for c in cats]
    titles = [table.column(s).title for s in chart.series]
    cats = [str(row.get(chart.x)) for row in table.rows]
    return cats, titles, [[_num(row.get(s)) for s in chart.series] for row in table.rows]


def hbars(chart: Chart, table: Table) -> str:
    """Grouped horizontal bars: one band per category, one bar per series."""
    cats, names, values = pivot(chart, table)
    flat = [v for row in values for v in row if v is not None]
    if not flat:
        return _empty(chart.title)
    kind = table.column(chart.series[0] if chart.series else chart.y).kind
    left, right, top, bar = 190.0, 70.0, 34.0, 9.0
    band = bar * len(names) + 8
    ticks = nice_ticks(0.0, max(flat))
    scale = (WIDTH - left - right) / ticks[-1]
    height = top + band * len(cats) + 30
    out: list[str] = []
    for t in ticks:
        x = left + t * scale
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 26:.0f}" '
            f'stroke="#ddd"/><text x="{x:.1f}" y="{height - 12:.0f}" '
            f'text-anchor="middle">{escape(tick_label(t, kind))}</text>'
        )
    for i, (cat, row) in enumerate(zip(cats, values, strict=True)):
        y0 = top + i * band
        out.append(
            f'<text x="{left - 6}" y="{y0 + band / 2 + 3:.1f}" '
            f'text-anchor="end">{escape(cat)}</text>'
        )
        if all(v is None for v in row):
            out.append(
                f'<text x="{left + 4}" y="{y0 + band / 2 + 3:.1f}" fill="#666" '
                f'font-size="10">{escape(chart.missing_text)}</text>'
            )
        for j, v in enumerate(row):
            if v is None:
                continue
            y = y0 + 4 + j * bar
            out.append(
                f'<rect x="{left}" y="{y:.1f}" width="{max(v * scale, 1):.1f}" '
                f'height="{bar - 1}" fill="{color(j)}"><title>{escape(cat)} '
                f"{escape(names[j])}: {escape(format_cell(v, kind))}</title></rect>"
                f'<text x="{left + v * scale + 3:.1f}" y="{y + bar - 2:.1f}" '
                f'font-size="9">{escape(format_cell(v, kind))}</text>'
            )
    return _framed(names, height, out, chart.title)


def stacked(chart: Chart, table: Table) -> str:
    """Vertical stacked bars: one bar per category (e.g. day), stacked by series."""
    cats, names, values = pivot(chart, table)
    totals = [sum(v for v in row if v is not None) for row in values]
    if not cats or max(totals) <= 0:
        return _empty(chart.title)
    kind = table.column(chart.y or chart.series[0]).kind
    left, bottom, top, height = 70.0, 40.0, 30.0, 300.0
    ticks = nice_ticks(0.0, max(totals))
    scale = (height - top - bottom) / ticks[-1]
    slot = (WIDTH - left - 10) / len(cats)
    out: list[str] = []
    for t in ticks:
        y = height - bottom - t * scale
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - 10}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{left - 4}" y="{y + 3:.1f}" '
            f'text-anchor="end">{escape(tick_label(t, kind))}</text>'
        )
    every = max(1, math.ceil(len(cats) / 12))  # keep axis labels legible
    for i, (cat, row) in enumerate(zip(cats, values, strict=True)):
        x, base = left + i * slot + slot * 0.1, height - bottom
        for j, v in enumerate(row):
            if not v:
                continue
            h = v * scale
            base -= h
            out.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{slot * 0.8:.1f}" '
                f'height="{h:.1f}" fill="{color(j)}"><title>{escape(cat)} '
                f"{escape(names[j])}: {escape(format_cell(v, kind))}</title></rect>"
            )
        if i % every == 0:
            out.append(
                f'<text x="{x + slot * 0.4:.1f}" y="{height - bottom + 14:.0f}" '
                f'text-anchor="middle">{escape(cat)}</text>'
            )
    return _framed(names, height, out, chart.title)


def _axes(
    xt: list[float],
    yt: list[float],
    box: tuple[float, float, float, float],
    kinds: tuple[str, str],
    titles: tuple[str, str],
) -> str:
    left, top, right, bottom = box
    sx = (right - left) / (xt[-1] - xt[0])
    sy = (bottom - top) / (yt[-1] - yt[0])
    out = []
    for t in xt:
        x = left + (t - xt[0]) * sx
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#eee"/>'
            f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">'
            f"{escape(tick_label(t, kinds[0]))}</text>"
        )
    for t in yt:
        y = bottom - (t - yt[0]) * sy
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">'
            f"{escape(tick_label(t, kinds[1]))}</text>"
        )
    out.append(
        f'<text x="{(left + right) / 2:.0f}" y="{bottom + 30}" text-anchor="middle" '
        f'font-weight="bold">{escape(titles[0])}</text>'
        f'<text transform="translate(14 {(top + bottom) / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle" font-weight="bold">{escape(titles[1])}</text>'
    )
    return "".join(out)


def scatter(chart: Chart, table: Table) -> str:
    pts = [
        (
            _num(r.get(chart.x)),
            _num(r.get(chart.y)),
            str(r.get(chart.group, "")),
            str(r.get(chart.label, "")),
        )
        for r in table.rows
    ]
    pts2 = [(x, y, g, lab) for x, y, g, lab in pts if x is not None and y is not None]
    if not pts2:
        return _empty(chart.title)
    groups = sorted({p[2] for p in pts2})
    xt = nice_ticks(0.0, max(p[0] for p in pts2))
    yt = nice_ticks(0.0, max(p[1] for p in pts2))
    box = (100.0, 30.0, WIDTH - 20.0, 330.0)
    kinds = (table.column(chart.x).kind, table.column(chart.y).kind)
    names = groups
    out = [_axes(xt, yt, box, kinds, (chart.x_title, chart.y_title))]
    sx = (box[2] - box[0]) / xt[-1]
    sy = (box[3] - box[1]) / yt[-1]
    for x, y, g, lab in pts2:
        cx, cy = box[0] + x * sx, box[3] - y * sy
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{color(groups.index(g))}" '
            f'fill-opacity="0.8"><title>{escape(lab)}: {escape(format_cell(x, kinds[0]))}'
            f"</title></circle>"
            f'<text x="{cx + 6:.1f}" y="{cy - 4:.1f}" font-size="9">{escape(lab)}</text>'
        )
    return _framed(names, 370, out, chart.title)


def lines(chart: Chart, table: Table) -> str:
    xs = [_num(r.get(chart.x)) for r in table.rows]
    series = [(table.column(s).title, [_num(r.get(s)) for r in table.rows]) for s in chart.series]
    ys = [v for _, vals in series for v in vals if v is not None]
    if not ys or not any(x is not None for x in xs):
        return _empty(chart.title)
    xt = nice_ticks(0.0, max(x for x in xs if x is not None), 8)
    yt = nice_ticks(0.0, max(ys))
    box = (100.0, 30.0, WIDTH - 20.0, 330.0)
    kinds = (table.column(chart.x).kind, table.column(chart.series[0]).kind)
    names = [n for n, _ in series]
    out = [_axes(xt, yt, box, kinds, (chart.x_title, chart.y_title))]
    sx, sy = (box[2] - box[0]) / xt[-1], (box[3] - box[1]) / yt[-1]
    for i, (_, vals) in enumerate(series):
        pts = " ".join(
            f"{box[0] + x * sx:.1f},{box[3] - y * sy:.1f}"
            for x, y in zip(xs, vals, strict=True)
            if x is not None and y is not None
        )
        dash = ' stroke-dasharray="6 3"' if i == 0 else ""
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="{color(i)}" stroke-width="2"{dash}/>'
        )
    for x, y, text in chart.marks:
        cx, cy = box[0] + x * sx, box[3] - y * sy
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="none" stroke="#000" '
            f'stroke-width="1.5"/><text x="{cx + 7:.1f}" y="{cy + 14:.1f}" '
            f'font-size="10" font-weight="bold">{escape(text)}</text>'
        )
    return _framed(names, 370, out, chart.title)


RENDERERS = {"bars": hbars, "stacked": stacked, "scatter": scatter, "lines": lines}


def render_chart(chart: Chart, table: Table) -> str:
    return RENDERERS[chart.kind](chart, table)
