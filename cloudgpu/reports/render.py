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

from cloudgpu.reports.model import Report, Table, format_cell, table_data
from cloudgpu.reports.svg import render_chart

FORMATS = ("html", "md", "csv", "json")

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #1b1b1b; background: #fff; max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #555; font-size: 12px; margin-bottom: 14px; }
.summary { background: #f3f7fb; border-left: 4px solid #0072B2; padding: 10px 14px; }
.summary p { margin: 4px 0; }
.summary p:first-child { font-weight: 600; font-size: 15px; }
figure { margin: 12px 0 18px; break-inside: avoid; }
figcaption { font-weight: 600; margin-bottom: 4px; }
figure .caption { color: #555; font-size: 12px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 10px; }
th, td { padding: 3px 9px; border-bottom: 1px solid #e4e4e4; text-align: left;
  white-space: nowrap; }
th { background: #f5f5f5; position: sticky; top: 0; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
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
    if fmt == "csv":
        return to_csv(report)
    if fmt == "json":
        return to_json(report)
    raise ValueError(f"unknown format {fmt!r}")


def _html_table(table: Table) -> str:
    head = "".join(
        f'<th class="{"n" if c.kind in _NUMERIC else "t"}">{escape(c.title)}</th>'
        for c in table.columns
    )
    body = []
    for row in table.rows:
        cells = "".join(
            f'<td class="{"n" if c.kind in _NUMERIC else "t"}">'
            f"{escape(format_cell(row.get(c.key), c.kind))}</td>"
            for c in table.columns
        )
        body.append(f"<tr>{cells}</tr>")
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return (
        f'<div class="scroll"><table id="table-{escape(table.id)}"><thead><tr>{head}'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>{note}"
    )


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
        out.extend([f"## {table.title}", ""])
        out.append("| " + " | ".join(_md_cell(c.title) for c in table.columns) + " |")
        out.append(
            "|" + "|".join("---:" if c.kind in _NUMERIC else "---" for c in table.columns) + "|"
        )
        for row in table.rows:
            cells = (_md_cell(format_cell(row.get(c.key), c.kind)) for c in table.columns)
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        if table.note:
            out.extend([f"_{table.note}_", ""])
    return "\n".join(out)


def to_csv(report: Report) -> str:
    """Every table in turn: a title row, a header row of keys, the rows, a blank line."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([f"# {report.title}", f"source: {report.source}", f"observed: {report.data_date}"])
    for table in report.tables:
        w.writerow([])
        w.writerow([f"## {table.id}", table.title])
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


def text_table(table: Table, width: int = 0) -> str:
    """A table as aligned plain text for the terminal (same cell text as the HTML)."""
    head = [c.title for c in table.columns]
    body = [[format_cell(row.get(c.key), c.kind) for c in table.columns] for row in table.rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    if width:
        widths = [min(w, width) for w in widths]

    def line(cells: list[str]) -> str:
        out = []
        for c, cell, w in zip(table.columns, cells, widths, strict=True):
            cell = cell if len(cell) <= w else cell[: w - 1] + "…"
            out.append(cell.rjust(w) if c.kind in _NUMERIC else cell.ljust(w))
        return "  ".join(out).rstrip()

    lines = [table.title, line(head), "  ".join("-" * w for w in widths)]
    lines += [line(cells) for cells in body]
    if table.note:
        lines.append(table.note)
    return "\n".join(lines)
