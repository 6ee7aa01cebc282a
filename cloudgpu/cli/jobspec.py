"""`cloudgpu schema`: print the JSON Schema of job.yaml (for editors and CI linters).

Thin: the schema itself lives in cloudgpu.spec.schema.
"""

from __future__ import annotations

import json

import click

from cloudgpu.cli.context import get_app
from cloudgpu.spec import json_schema


@click.command("schema")
@click.option(
    "--check",
    "check",
    type=click.Path(dir_okay=False),
    metavar="JOB.yaml",
    help="Validate a job file instead of printing the schema.",
)
def schema(check: str | None) -> None:
    """Print the JSON Schema of job.yaml.

    Point your editor at it, e.g. with yaml-language-server:
    `cloudgpu schema > job.schema.json` and `# yaml-language-server: $schema=job.schema.json`.
    """
    if check:
        job = get_app().load_job(check)
        click.echo(f"{check}: ok (job '{job.name}')")
        return
    click.echo(json.dumps(json_schema(), indent=2))
