"""`cloudgpu down JOB | --all | --orphans | --purge JOB`: bring jobs down, sweep orphans.

Before anything is terminated the job's declared outputs are fetched from instances that
answer (``--collect``: required, the instance is kept if they cannot be; ``--no-collect``:
skip), and the user confirms what will go unless ``--yes``. Exit status is non-zero
whenever something was not removed, so a script never takes "down" for "gone". Thin:
the work is in cloudgpu.lifecycle.down.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from cloudgpu.cli.context import App, get_app
from cloudgpu.cli.jobs import complete_job, lifecycle_deps
from cloudgpu.costs import billing
from cloudgpu.errors import ConfigError, ProviderError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.down import down_job, find_orphans, purge_job, remove_orphans
from cloudgpu.lifecycle.output import PREFIX
from cloudgpu.provider import Capabilities
from cloudgpu.state.store import InstanceRecord, JobRecord, Store


@click.command("down")
@click.argument("job", required=False, shell_complete=complete_job)
@click.option("--all", "all_", is_flag=True, help="Every running or kept job.")
@click.option("--orphans", is_flag=True, help="Tagged resources no live job holds.")
@click.option(
    "--purge", is_flag=True,
    help="Forget JOB's instance records without asking its provider (gone or unreachable).",
)  # fmt: skip
@click.option(
    "--collect/--no-collect", default=None,
    help="Fetch declared outputs first: by default when the instance answers; --collect: "
    "required (the instance is kept if they cannot be fetched); --no-collect: skip.",
)  # fmt: skip
@click.option(
    "--force", is_flag=True,
    help="With --orphans: also what a client this store cannot see still holds a lease on.",
)  # fmt: skip
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def down(job: str | None, all_: bool, orphans: bool, purge: bool, **flags: Any) -> None:
    """Tear down a job's instances (stopping it first), all jobs, or orphans.

    \b
    `down --purge JOB` is for a record stuck because its provider is gone: it says what
    may still be billing, then drops the record without any provider call.
    Exit status: 0 when everything asked for is gone, else non-zero.
    """
    if sum(bool(x) for x in (job, all_, orphans)) != 1:
        raise ConfigError("give exactly one of JOB, --all or --orphans")
    if purge and not job:
        raise ConfigError("--purge needs a JOB")
    if flags["force"] and not orphans:
        raise ConfigError("--force goes with --orphans")
    app = get_app()
    store = app.store()
    if purge:
        assert job is not None
        _purge(app, store, store.find_job(job), flags["yes"], flags["as_json"])
        return
    deps = lifecycle_deps(app, store)
    result = _orphans(app, deps, flags) if orphans else _down_jobs(store, deps, job, flags)
    if flags["as_json"]:
        click.echo(json.dumps(result, indent=2))
    elif orphans:
        removed = result["orphans"]
        click.echo(f"{len(removed)} orphan(s) removed" + "".join(f"\n  {r}" for r in removed))
    else:
        for j in result["jobs"]:
            click.echo(f"{j['id']}: down" + ("" if not j["failures"] else " (NOT all removed)"))
        if not result["jobs"]:
            click.echo("nothing to bring down")
    failures = result["failures"]
    if failures:
        raise ProviderError(
            f"{len(failures)} not removed: {failures[0]}",
            hint="it may still bill: run the same `cloudgpu down` again, or see the console",
        )


def confirm(yes: bool, question: str, listing: list[str]) -> None:
    """Show what would go and ask; without a terminal, --yes is required."""
    if yes:
        return
    for line in listing:
        click.echo(f"  {line}", err=True)
    if not sys.stdin.isatty():
        raise ConfigError(f"{question.rstrip('?')}: confirm with --yes when not interactive")
    click.confirm(question, abort=True, err=True)


def _orphans(app: App, deps: Deps, flags: dict[str, Any]) -> dict[str, Any]:
    skipped = lambda name, why: click.echo(f"{PREFIX}{name}: skipped ({why})", err=True)  # noqa: E731
    sweep = find_orphans(deps, app.registry.enabled(on_skip=skipped), force=flags["force"])
    for line in sweep.skipped:
        click.echo(f"{PREFIX}left alone: {line}", err=True)
    found = sweep.lines()
    if found:
        confirm(flags["yes"], f"Remove {len(found)} orphan(s)?", found)
    removed, failures = remove_orphans(deps, sweep, collect=flags["collect"] is not False)
    for line in failures:
        click.echo(f"{PREFIX}{line}", err=True)
    return {"jobs": [], "orphans": removed, "skipped": sweep.skipped, "failures": failures}


def _down_jobs(store: Store, deps: Deps, ref: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    targets = (
        [store.find_job(ref)]
        if ref
        else [
            j
            for j in store.jobs()
            if j.state in (*states.ACTIVE, states.KEPT) or store.instances(j.id, live_only=True)
        ]
    )
    live = [
        f"{r.provider} {r.provider_id or r.id} {r.instance_type} (job {j.id})"
        for j in targets
        for r in store.instances(j.id, live_only=True)
    ]
    if live:
        confirm(flags["yes"], f"Tear down {len(live)} instance(s)?", live)
    done, failures = [], []
    for j in targets:
        failed = down_job(deps, j, collect=flags["collect"])
        failures += failed
        done.append({"id": j.id, "state": store.job(j.id).state, "failures": failed})
    return {"jobs": done, "orphans": [], "failures": failures}


def _purge(app: App, store: Store, job: JobRecord, yes: bool, as_json: bool) -> None:
    """Say what may still bill, confirm, then drop the records (no provider call)."""
    now = time.time()
    live = store.instances(job.id, live_only=True)
    caps_of = app.registry.capabilities
    bills = [_may_bill(r, now, caps_of(r.provider)) for r in live]
    for b in bills:
        click.echo(
            f"may still bill: {b['provider']} {b['provider_id'] or '(id never recorded)'} "
            f"{b['instance_type']} in {b['region'] or '?'} at ${b['price_per_hour']:.4f}/h, "
            f"up {b['hours']:.1f} h (~${b['estimated_cost']:.2f} so far); check the "
            f"{b['provider']} console and delete it there",
            err=True,
        )
    if bills and not yes:
        if not sys.stdin.isatty():
            raise ConfigError("--purge forgets instances that may still bill: confirm with --yes")
        click.confirm(f"Forget {len(bills)} instance record(s) of {job.id}?", abort=True)
    purge_job(lifecycle_deps(app, store), job)
    if as_json:
        click.echo(json.dumps({"purged": job.id, "may_still_bill": bills}, indent=2))
    else:
        click.echo(f"{job.id}: purged ({len(bills)} instance record(s) dropped)")


def _may_bill(rec: InstanceRecord, now: float, caps: Capabilities) -> dict[str, Any]:
    hours = max(0.0, now - rec.launched_at) / 3600 if rec.launched_at else 0.0
    return {
        "provider": rec.provider,
        "provider_id": rec.provider_id,
        "instance_type": rec.instance_type,
        "region": rec.region,
        "price_per_hour": rec.price_per_hour,
        "hours": round(hours, 3),
        "estimated_cost": round(billing.instance_cost(rec, now, caps), 4),
    }
