"""`cloudgpu data ls SRC` and `cloudgpu data probe JOB`: what a source holds, and
whether a job's instance can feed its GPUs. Thin: the work is in cloudgpu.data."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from cloudgpu import remote
from cloudgpu.cli.context import get_app
from cloudgpu.cli.jobs import _live_instance
from cloudgpu.data import probe as probing
from cloudgpu.data import pull, uri
from cloudgpu.data.select import selector_for
from cloudgpu.errors import ConfigError
from cloudgpu.lifecycle.collect import instance_of
from cloudgpu.lifecycle.output import human_bytes
from cloudgpu.sshkeys import ensure_keypair
from cloudgpu.state import probes


@click.group("data")
def data() -> None:
    """Remote data sources and the will-the-GPU-starve probe."""


@data.command("ls")
@click.argument("source")
@click.option("--exclude", multiple=True, help="gitignore-style pattern to leave out.")
@click.option("--json", "as_json", is_flag=True, help="JSON: objects, bytes, excluded, notes.")
@click.option("--limit", type=click.IntRange(0), default=20, show_default=True)
def ls(source: str, exclude: tuple[str, ...], as_json: bool, limit: int) -> None:
    """List SOURCE (s3://, gs://, az://, https://) as a job would pull it; reads no object.

    The .cloudgpuignore of the current directory applies, as it does beside a job file.
    """
    if not uri.is_remote(source):
        raise ConfigError(f"{source}: expected s3://, gs://, az:// or https://")
    try:
        uri.parse(source)
        selector = selector_for(exclude, Path.cwd())
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    listing = pull.list_source(source, selector, get_app().env)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "source": str(listing.source),
                    "objects": len(listing.objects),
                    "bytes": listing.bytes,
                    "excluded": listing.excluded,
                    "notes": listing.notes,
                    "sample": [o.rel for o in listing.objects[:limit]],
                },
                indent=2,
            )
        )
        return
    for o in listing.objects[:limit] if limit else listing.objects:
        click.echo(f"{o.size:>14,}  {o.rel}")
    for note in listing.notes:
        click.echo(f"note: {note}", err=True)
    more = len(listing.objects) - limit if limit else 0
    click.echo(
        (f"... {more} more\n" if more > 0 else "")
        + f"{len(listing.objects)} object(s), {human_bytes(listing.bytes)}"
        + (f", {listing.excluded} excluded" if listing.excluded else "")
    )


@data.command("probe")
@click.argument("job")
@click.option("--quick", is_flag=True, help="A 4-second version (what launch runs).")
@click.option("--no-gpu", is_flag=True, help="Skip the GPU part.")
@click.option("--json", "as_json", is_flag=True, help="The measurements and verdict as JSON.")
def probe(job: str, quick: bool, no_gpu: bool, as_json: bool) -> None:
    """Measure JOB's instance: NVMe GB/s, 4 KiB IOPS, small files/s (and GPU TFLOPS, HBM
    and host-to-device GB/s where torch sees a GPU); say whether the GPUs would starve."""
    app = get_app()
    store = app.store()
    jrec, rec = _live_instance(store, job)
    inst = instance_of(rec)
    key = None if inst.ssh is None or inst.ssh.key_file else ensure_keypair(app.paths.keys_dir)[0]
    machine = remote.connect(
        inst, known_hosts=app.paths.data_dir / "known_hosts", key_file=key, timeout=30
    )
    try:
        result = probing.run_probe(machine, quick=quick, gpu=not no_gpu)
    finally:
        machine.close()
    probes.record(store, jrec.id, rec.provider, rec.instance_type, rec.gpu, time.time(), result)
    need = probing.need_of(jrec.spec.get("workload"), rec.gpu_count)
    v = probing.verdict(result, need)
    if as_json:
        click.echo(
            json.dumps(
                {**result, "verdict": v.bottleneck, "headline": v.headline, "advice": v.advice},
                indent=2,
            )
        )
        return
    click.echo(f"{jrec.id} on {rec.provider} {rec.instance_type}: {probing.summary(result)}")
    click.echo(v.headline)
    for a in v.advice:
        click.echo(f"  - {a}")
    click.echo(f"(probe took {result.get('seconds', 0):.1f} s; kept for {rec.instance_type})")
