"""Render a Report as HTML, Markdown, CSV or JSON text.

The HTML is one self-contained file: styles inline, charts as inline SVG, no script, no
web font, no link to anything, and print rules so it reads on paper. Markdown shows the
same cell text as the HTML; CSV and JSON carry the same values unformatted. Rendering
never writes files (the CLI does) and never computes numbers (the builders do).
"""

from __future__ import annotations

import csv
import io
import json
from html import escape
from typing import Any

from cloudgpu.reports.model import Column, Report, Table, format_cell, table_data
from cloudgpu.reports.svg import render_chart
from cloudgpu.texttable import render_table

FORMATS = ("html", "md", "csv", "json")

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #1b1b1b; background: #fff; max-width: 1200px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #555; font-size: 12px; margin-bottom: 14px; }
.summary { background: #f3f7fb; border-left: 4px solid #0072B2; padding: 10px 14px; }
.summary p { margin: 4px 0; }
.summary p:first-child { font-weight: 600; font-size: 15px; }
figure { margin: 12px 0 18px; break-inside: avoid; }
figcaption { font-weight: 600; margin-bottom: 4px; }
figure .caption { color: #555; font-size: 12px; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 10px; max-width: 100%; }
th, td { padding: 3px 7px; border-bottom: 1px solid #e4e4e4; text-align: left;
  vertical-align: top; }
td.t { overflow-wrap: break-word; }
th { background: #f5f5f5; position: sticky; top: 0; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.n { white-space: nowrap; }
.flag { display: inline-block; margin-left: 4px; padding: 0 4px; border-radius: 3px;
  background: #fde8d0; color: #7a3b00; font-size: 11px; white-space: nowrap; }
figure svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 12px; }
footer { color: #666; font-size: 11px; margin-top: 30px; border-top: 1px solid #ddd;
  padding-top: 8px; }
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  .summary { background: none; border-left: 3px solid #000; }
  th { position: static; }
  .scroll { overflow: visible; }
  table { page-break-inside: auto; font-size: 8.5px; width: 100%; }
  th, td { white-space: normal; padding: 2px 3px; overflow-wrap: break-word; }
  tr { page-break-inside: avoid; }
  h2 { page-break-after: avoid; }
  @page { margin: 14mm; }
}
"""

_NUMERIC = {"int", "usd", "usd0", "cents", "pct", "num", "value", "months"}


def render(report: Report, fmt: str) -> str:
    if fmt == "html":
        return to_html(report)
    if fmt == "md":
        return to_markdown(report)
    if fmt == "csv":  # one table per file: the caller picks the table (csv_tables)
        raise ValueError("CSV is one table per file: render each with to_csv(table)")
    if fmt == "json":
        return to_json(report)
    raise ValueError(f"unknown format {fmt!r}")


def _cls(c: Column) -> str:
    return "n" if c.kind in _NUMERIC else "t"


def _flags(row: dict[str, Any], attached: list[Column]) -> list[str]:
    return [str(row[a.key]) for a in attached if row.get(a.key)]


def _html_table(table: Table) -> str:
    shown = table.shown()
    head = "".join(f'<th class="{_cls(c)}">{escape(c.title)}</th>' for c, _ in shown)
    body = []
    for row in table.rows:
        cells = []
        for c, attached in shown:
            flags = "".join(f'<span class="flag">{escape(f)}</span>' for f in _flags(row, attached))
            value = escape(format_cell(row.get(c.key), c.kind))
            cells.append(f'<td class="{_cls(c)}">{value}{flags}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return (
        f'<div class="scroll"><table id="table-{escape(table.id)}"><thead><tr>{head}'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>{note}"
    )


def cell_text(row: dict[str, Any], column: Column, attached: list[Column]) -> str:
    """A cell as plain text (Markdown, terminal): the value, then its flags in brackets."""
    text = format_cell(row.get(column.key), column.kind)
    return text + "".join(f" [{f}]" for f in _flags(row, attached))


def to_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No request may leave the page: forbid every fetch, allow only inline style.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{escape(report.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(report.title)}</h1>",
        f'<div class="meta">Data: {escape(report.source)} &middot; observed '
        f"{escape(report.data_date)} &middot; generated {escape(report.generated_at)}</div>",
    ]
    if report.summary:
        lines = "".join(f"<p>{escape(s)}</p>" for s in report.summary)
        parts.append(f'<section class="summary">{lines}</section>')
    for table in report.tables:
        parts.append(f'<h2 id="{escape(table.id)}">{escape(table.title)}</h2>')
        for chart in report.charts_for(table.id):
            caption = f'<div class="caption">{escape(chart.caption)}</div>' if chart.caption else ""
            parts.append(
                f'<figure id="chart-{escape(chart.id)}"><figcaption>'
                f"{escape(chart.title)}</figcaption>{render_chart(chart, table)}"
                f"{caption}</figure>"
            )
        parts.append(_html_table(table))
    parts.append(
        f"<footer>cloudgpu {escape(report.kind)} report. Source: "
        f"{escape(report.source)}; data observed {escape(report.data_date)}."
        "</footer></body></html>"
    )
    return "\n".join(parts) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report) -> str:
    out = [f"# {report.title}", ""]
    out.append(
        f"_Data: {report.source}; observed {report.data_date}; generated {report.generated_at}._"
    )
    out.append("")
    for s in report.summary:
        out.extend([f"> {s}", ">"])
    if report.summary:
        out[-1] = ""
    for table in report.tables:
        shown = table.shown()
        out.extend([f"## {table.title}", ""])
        out.append("| " + " | ".join(_md_cell(c.title) for c, _ in shown) + " |")
        out.append("|" + "|".join("---:" if c.kind in _NUMERIC else "---" for c, _ in shown) + "|")
        for row in table.rows:
            cells = (_md_cell(cell_text(row, c, a)) for c, a in shown)
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        if table.note:
            out.extend([f"_{table.note}_", ""])
    return "\n".join(out)


def to_csv(table: Table) -> str:
    """One table as plain CSV: a header row of column keys, then the rows, values
    unformatted (what pandas.read_csv and spreadsheets load without options)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([c.key for c in table.columns])
    for row in table_data(table):
        w.writerow(["" if v is None else v for v in row.values()])
    return buf.getvalue()


def to_json(report: Report) -> str:
    doc: dict[str, Any] = {
        "title": report.title,
        "kind": report.kind,
        "summary": report.summary,
        "source": report.source,
        "data_date": report.data_date,
        "generated_at": report.generated_at,
        "tables": {
            t.id: {
                "title": t.title,
                "columns": [{"key": c.key, "title": c.title, "kind": c.kind} for c in t.columns],
                "rows": table_data(t),
                "note": t.note,
            }
            for t in report.tables
        },
        "charts": [
            {
                "id": c.id,
                "title": c.title,
                "kind": c.kind,
                "table": c.table,
                "x": c.x,
                "series": c.series,
                "y": c.y,
                "group": c.group,
                "marks": [{"x": m[0], "y": round(m[1], 2), "text": m[2]} for m in c.marks],
            }
            for c in report.charts
        ],
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def text_table(table: Table, width: int | None = None) -> str:
    """A table as aligned plain text for the terminal (same cell text as the HTML),
    narrowed to ``width`` (the terminal's) where it would not fit."""
    shown = table.shown()
    head = [c.title for c, _ in shown]
    body = [[cell_text(row, c, a) for c, a in shown] for row in table.rows]
    right = {i for i, (c, _) in enumerate(shown) if c.kind in _NUMERIC}
    lines = [table.title, *render_table(head, body, right=right, width=width, rule=True)]
    if table.note:
        lines.append(table.note)
    return "\n".join(lines)
