"""`cloudgpu init [TEMPLATE] [DIR]`: copy a starter job and its data and code out of the
installed package. Thin: the templates and the safe copy live in cloudgpu.scaffold."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cloudgpu.scaffold import TEMPLATES, copy_template, get_template


@click.command("init")
@click.argument("template", required=False, default="quickstart")
@click.argument("directory", required=False, default=".", type=click.Path(file_okay=False))
@click.option("--list", "list_", is_flag=True, help="List the templates and stop.")
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def init(template: str, directory: str, list_: bool, force: bool, as_json: bool) -> None:
    if list_:
        rows = [{"name": t.name, "summary": t.summary, "job": t.job} for t in TEMPLATES.values()]
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        width = max(len(t) for t in TEMPLATES)
        for r in rows:
            click.echo(f"{r['name']:{width}}  {r['summary']}")
        return
    t = get_template(template)
    dest = Path(directory)
    written = copy_template(t, dest, force=force)
    if as_json:
        doc = {
            "template": t.name,
            "directory": str(dest),
            "files": [str(p) for p in written],
            "job": str(dest / t.job) if t.job else None,
            "next": t.next_for(dest),
        }
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"wrote {len(written)} file(s) of template {t.name} into {dest}:")
    for top in dict.fromkeys(dst.split("/")[0] for _, dst in t.files):
        click.echo(f"  {dest / top}")
    click.echo(f"next: {t.next_for(dest)}")


_WIDTH = max(len(name) for name in TEMPLATES)
init.help = (
    "Copy a starter job (with its data and code) into DIRECTORY (default: here).\n\n"
    "\b\nTEMPLATE (default quickstart):\n"
    + "\n".join(f"  {t.name:{_WIDTH}}  {t.summary}" for t in TEMPLATES.values())
    + "\n\nExisting files are never overwritten without --force."
)
