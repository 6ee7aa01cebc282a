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


def _axis_title(x: float, y: float, text: str, *, vertical: bool = False) -> str:
    """An axis's name with its unit; class axis-title lets tests find every one."""
    place = (
        f'transform="translate({x:.0f} {y:.0f}) rotate(-90)"'
        if vertical
        else (f'x="{x:.0f}" y="{y:.0f}"')
    )
    return (
        f'<text class="axis-title" {place} text-anchor="middle" font-weight="bold">'
        f"{escape(text)}</text>"
    )


def _text_width(text: str, size: float = 11.0) -> float:
    """Width of ``text`` in the chart's sans-serif font, erring wide (0.62 em per
    character; capitals and digits run about 0.6)."""
    return 0.62 * size * len(text)


def fit_text(text: str, width: float, size: float = 11.0) -> str:
    """``text`` shortened with an ellipsis to fit ``width`` pixels."""
    if _text_width(text, size) <= width:
        return text
    keep = max(int(width / (0.6 * size)) - 1, 1)
    return text[:keep] + "…"


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
    longest = max((_text_width(c) for c in cats), default=0.0)
    left, right, top, bar = min(max(120.0, longest + 14), 260.0), 70.0, 50.0, 9.0
    band = bar * len(names) + 8
    ticks = nice_ticks(0.0, max(flat))
    scale = (WIDTH - left - right) / ticks[-1]
    height = top + band * len(cats) + 48
    out: list[str] = [  # the category axis is named above its labels, from the left edge
        f'<text class="axis-title" x="10" y="{top - 10:.0f}" font-weight="bold">'
        f"{escape(fit_text(chart.y_title, WIDTH - 20))}</text>",
        _axis_title((left + WIDTH - right) / 2, height - 4, chart.x_title),
    ]
    for t in ticks:
        x = left + t * scale
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 44:.0f}" '
            f'stroke="#ddd"/><text x="{x:.1f}" y="{height - 30:.0f}" '
            f'text-anchor="middle">{escape(tick_label(t, kind))}</text>'
        )
    for i, (cat, row) in enumerate(zip(cats, values, strict=True)):
        y0 = top + i * band
        out.append(
            f'<text x="{left - 6}" y="{y0 + band / 2 + 3:.1f}" text-anchor="end">'
            f"<title>{escape(cat)}</title>{escape(fit_text(cat, left - 12))}</text>"
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
    left, bottom, top, height = 84.0, 48.0, 30.0, 310.0
    ticks = nice_ticks(0.0, max(totals))
    scale = (height - top - bottom) / ticks[-1]
    slot = (WIDTH - left - 10) / len(cats)
    out: list[str] = [
        _axis_title(16, (top + height - bottom) / 2, chart.y_title, vertical=True),
        _axis_title((left + WIDTH - 10) / 2, height - 6, chart.x_title),
    ]
    for t in ticks:
        y = height - bottom - t * scale
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - 10}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{left - 4}" y="{y + 3:.1f}" '
            f'text-anchor="end">{escape(tick_label(t, kind))}</text>'
        )
    # Label every n-th bar so labels never touch: as many as their widths allow.
    widest = max(_text_width(c) for c in cats) + 8
    every = max(1, math.ceil(widest / slot))
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
    out.append(_axis_title((left + right) / 2, bottom + 32, titles[0]))
    out.append(_axis_title(16, (top + bottom) / 2, titles[1], vertical=True))
    return "".join(out)


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


class LabelPlacer:
    """Puts point labels where they overlap neither each other nor a point, inside the
    plot: right of the point, then left, above, below. A label that fits nowhere is
    left out (its point keeps a tooltip, and the table beside the chart names it)."""

    def __init__(self, bounds: Box, points: Sequence[tuple[float, float]], size: float) -> None:
        self.bounds = bounds
        self.size = size
        self.taken: list[Box] = [(x - 4, y - 4, x + 4, y + 4) for x, y in points]

    def _free(self, box: Box) -> bool:
        x0, y0, x1, y1 = box
        bx0, by0, bx1, by1 = self.bounds
        if x0 < bx0 or x1 > bx1 or y0 < by0 or y1 > by1:
            return False
        return all(x1 <= a0 or x0 >= a1 or y1 <= b0 or y0 >= b1 for a0, b0, a1, b1 in self.taken)

    def place(self, cx: float, cy: float, text: str, extra: str = "") -> str:
        w, h = _text_width(text, self.size), self.size
        for x, y in ((cx + 7, cy + h / 3), (cx - 7 - w, cy + h / 3), (cx - w / 2, cy - 7),
                     (cx - w / 2, cy + 7 + h)):  # fmt: skip
            box = (x - 2, y - h * 0.9, x + w + 2, y + h * 0.3)  # a little air around it
            if self._free(box):
                self.taken.append(box)
                return (  # a white halo keeps the label legible over grid and lines
                    f'<text class="point-label" x="{x:.1f}" y="{y:.1f}" '
                    f'font-size="{self.size:g}" stroke="#fff" stroke-width="3" '
                    f'paint-order="stroke"{extra}>{escape(text)}</text>'
                )
        return ""


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
    where = [(box[0] + x * sx, box[3] - y * sy) for x, y, _, _ in pts2]
    labels = LabelPlacer((box[0], 0.0, WIDTH - 2.0, box[3]), where, 9.0)
    # Cheapest first: when labels crowd, the points a reader looks for keep theirs.
    order = sorted(range(len(pts2)), key=lambda i: pts2[i][0])
    for i in order:
        x, y, g, lab = pts2[i]
        cx, cy = where[i]
        tip = f"{lab}: {format_cell(x, kinds[0])}, {format_cell(y, kinds[1])}"
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{color(groups.index(g))}" '
            f'fill-opacity="0.8"><title>{escape(tip)}</title></circle>'
        )
        out.append(labels.place(cx, cy, lab))
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
    where = [(box[0] + x * sx, box[3] - y * sy) for x, y, _ in chart.marks]
    labels = LabelPlacer((box[0], box[1], WIDTH - 2.0, box[3]), where, 10.0)
    for (cx, cy), (_, _, text) in zip(where, chart.marks, strict=True):
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="none" stroke="#000" '
            f'stroke-width="1.5"><title>{escape(text)}</title></circle>'
        )
        out.append(labels.place(cx, cy, text, ' font-weight="bold"'))
    return _framed(names, 370, out, chart.title)


RENDERERS = {"bars": hbars, "stacked": stacked, "scatter": scatter, "lines": lines}


def render_chart(chart: Chart, table: Table) -> str:
    return RENDERERS[chart.kind](chart, table)
