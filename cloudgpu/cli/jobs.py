"""`cloudgpu status | logs | down | ssh | exec`: look at and act on launched jobs.

`status` reads only the state store (never a provider). `down` stops a job's lifecycle
process and tears its instances down; `down --orphans` sweeps tagged instances no live
job owns. Thin: the work is in cloudgpu.lifecycle.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from typing import Any

import click

from cloudgpu import remote
from cloudgpu.cli.context import App, get_app
from cloudgpu.errors import CloudGPUError, ConfigError, RemoteError, StateError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.down import down_job, sweep_orphans
from cloudgpu.lifecycle.launch import owner
from cloudgpu.lifecycle.output import PREFIX
from cloudgpu.lifecycle.reaper import ACTIVITY
from cloudgpu.provider import Instance, InstanceState, SSHTarget
from cloudgpu.sshkeys import ensure_keypair
from cloudgpu.state.store import InstanceRecord, JobRecord, Store


class _EchoSink:
    """Lifecycle messages of `down` go to the terminal (stderr)."""

    def info(self, message: str) -> None:
        click.echo(PREFIX + message, err=True)

    def job_output(self, data: bytes, *, stderr: bool = False) -> None:
        click.echo(data.decode(errors="replace"), nl=False, err=stderr)

    def progress(self, label: str, done: int, total: int) -> None:
        return None


def _deps(app: App, store: Store) -> Deps:
    return Deps(
        store=store,
        provider=app.registry.get,
        paths=app.paths,
        sink=_EchoSink(),
        owner=owner(),
        connect=remote.connect,
        env=app.env,
    )


# -- status ------------------------------------------------------------------------------


def job_cost(store: Store, job: JobRecord, now: float) -> float:
    """Recorded spend plus per-second accrual of live instances (store only)."""
    total = sum(s.cost for s in store.spend(job_id=job.id))
    for rec in store.instances(job.id, live_only=True):
        if rec.launched_at is not None:
            total += rec.price_per_hour * max(0.0, now - rec.launched_at) / 3600
    return total


def job_dict(store: Store, job: JobRecord, now: float, events: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "provider": job.provider,
        "instance_type": job.instance_type,
        "cost": round(job_cost(store, job, now), 6),
        "exit_code": job.exit_code,
        "error": job.error,
        "log": job.log_path,
        "created_at": job.created_at,
        "instances": [
            {
                "id": r.id,
                "provider_id": r.provider_id,
                "provider": r.provider,
                "state": r.state,
                "instance_type": r.instance_type,
                "market": r.market,
                "price_per_hour": r.price_per_hour,
            }
            for r in store.instances(job.id)
        ],
    }
    if events:
        d["events"] = [
            {"ts": e["ts"], "kind": e["kind"], "message": e["message"]}
            for e in store.events(job.id)
        ]
    return d


@click.command("status")
@click.argument("job", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(job: str | None, as_json: bool) -> None:
    """Jobs and their instances (from the local state store); JOB shows its history."""
    store = get_app().store()
    now = time.time()
    jobs = [store.find_job(job)] if job else store.jobs()
    rows = [job_dict(store, j, now, events=bool(job)) for j in jobs]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no jobs yet: `cloudgpu launch job.yaml`")
        return
    click.echo(f"{'JOB':<28} {'STATE':<13} {'PROVIDER':<9} {'TYPE':<20} {'COST':>10}  INSTANCES")
    for r in rows:
        inst = ", ".join(f"{i['provider_id'] or i['id']}:{i['state']}" for i in r["instances"])
        click.echo(
            f"{r['id']:<28} {r['state']:<13} {r['provider'] or '-':<9} "
            f"{r['instance_type'] or '-':<20} {'$' + format(r['cost'], '.4f'):>10}  {inst or '-'}"
        )
    for r in rows:
        for e in r.get("events", []):
            stamp = time.strftime("%H:%M:%S", time.localtime(e["ts"]))
            click.echo(f"  {stamp} {e['kind']:<20} {e['message']}")


# -- logs --------------------------------------------------------------------------------


@click.command("logs")
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
def logs(job: str, follow: bool) -> None:
    """Show a job's log (its output and the lifecycle's messages)."""
    store = get_app().store()
    rec = store.find_job(job)
    if not rec.log_path:
        raise StateError(f"job {rec.id} has no log")
    path = rec.log_path
    out = sys.stdout.buffer
    pos = 0
    while True:
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
        except FileNotFoundError:
            chunk = b""
        if chunk:
            out.write(chunk)
            out.flush()
            pos += len(chunk)
            continue
        if not follow or not _running(store.job(rec.id)):
            return
        time.sleep(0.2)


def _running(job: JobRecord) -> bool:
    """More output may come: the job is under way, or its process is still tearing down."""
    if job.state in states.ACTIVE and job.pid is None:
        return True  # a detached job whose process is being started
    return states.lifecycle_running(job.pid)


# -- down --------------------------------------------------------------------------------


@click.command("down")
@click.argument("job", required=False)
@click.option("--all", "all_", is_flag=True, help="Every running or kept job.")
@click.option("--orphans", is_flag=True, help="Tagged instances no live job owns.")
def down(job: str | None, all_: bool, orphans: bool) -> None:
    """Tear down a job's instances (stopping it first), all jobs, or orphans."""
    if sum(bool(x) for x in (job, all_, orphans)) != 1:
        raise ConfigError("give exactly one of JOB, --all or --orphans")
    app = get_app()
    store = app.store()
    deps = _deps(app, store)
    failures: list[str] = []
    if orphans:
        removed = sweep_orphans(deps, _enabled(app))
        click.echo(f"{len(removed)} orphan(s) removed" + "".join(f"\n  {r}" for r in removed))
        return
    targets = (
        [store.find_job(job)]
        if job
        else [
            j
            for j in store.jobs()
            if j.state in (*states.ACTIVE, states.KEPT) or store.instances(j.id, live_only=True)
        ]
    )
    for j in targets:
        failures += down_job(deps, j)
        click.echo(f"{j.id}: down")
    if not targets:
        click.echo("nothing to bring down")
    if failures:
        raise RemoteError(f"{len(failures)} teardown(s) failed: {failures[0]}")


def _enabled(app: App) -> list[Any]:
    out = []
    for name in app.registry.names():
        try:
            p = app.registry.get(name)
            if p.availability().enabled:
                out.append(p)
        except (ImportError, AttributeError, CloudGPUError) as exc:
            click.echo(f"{PREFIX}{name}: skipped ({exc})", err=True)
    return out


# -- ssh / exec --------------------------------------------------------------------------


def _live_instance(store: Store, ref: str) -> tuple[JobRecord, InstanceRecord]:
    job = store.find_job(ref)
    live = [r for r in store.instances(job.id, live_only=True) if r.provider_id]
    if not live:
        raise StateError(
            f"job {job.id} has no running instance ({job.state})",
            hint="`cloudgpu launch --keep` leaves the instance up after the job",
        )
    return job, live[-1]


def to_instance(rec: InstanceRecord) -> Instance:
    s = rec.ssh
    target = None
    if s.get("host"):
        target = SSHTarget(
            host=s["host"],
            port=int(s.get("port", 22)),
            user=s.get("user", "root"),
            host_key_fingerprints=tuple(s.get("fingerprints", ())),
            key_file=s.get("key_file"),
        )
    return Instance(
        id=rec.provider_id,
        provider=rec.provider,
        state=InstanceState.RUNNING,
        instance_type=rec.instance_type,
        ssh=target,
        nvme_mount=s.get("nvme", "/nvme"),
        workdir=s.get("workdir", ""),
        tags=rec.tags,
    )


@click.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("job")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(job: str, command: tuple[str, ...]) -> None:
    """Open a shell on a job's instance (`cloudgpu ssh JOB [-- CMD]`), with the system
    ssh checking the host key against cloudgpu's pins."""
    app = get_app()
    store = app.store()
    jrec, rec = _live_instance(store, job)
    inst = to_instance(rec)
    store.add_event(jrec.id, ACTIVITY, "ssh", rec.id)
    if inst.ssh is None:
        env = {**app.env, "CLOUDGPU_NVME": inst.nvme_mount, "CLOUDGPU_INSTANCE": inst.id}
        argv = [app.env.get("SHELL", "/bin/bash")]
        if command:
            argv += ["-c", " ".join(shlex.quote(c) for c in command)]
        sys.exit(subprocess.call(argv, cwd=inst.workdir or None, env=env))
    key = inst.ssh.key_file or str(ensure_keypair(app.paths.keys_dir)[0])
    known = app.paths.data_dir / "known_hosts"
    argv = [
        "ssh",
        "-i",
        key,
        "-p",
        str(inst.ssh.port),
        "-o",
        f"UserKnownHostsFile={known}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "LogLevel=ERROR",
    ]
    argv += ["-t"] if not command else []
    argv += [f"{inst.ssh.user}@{inst.ssh.host}", *command]
    sys.exit(subprocess.call(argv))


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("job")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(job: str, command: tuple[str, ...]) -> None:
    """Run COMMAND on a job's instance: `cloudgpu exec JOB -- nvidia-smi`."""
    app = get_app()
    store = app.store()
    jrec, rec = _live_instance(store, job)
    inst = to_instance(rec)
    store.add_event(jrec.id, ACTIVITY, "exec", rec.id)
    key = None if inst.ssh is None or inst.ssh.key_file else ensure_keypair(app.paths.keys_dir)[0]
    machine = remote.connect(
        inst,
        known_hosts=app.paths.data_dir / "known_hosts",
        key_file=key,
        timeout=30,
        use_openssh=False,
    )
    out = sys.stdout.buffer
    err = sys.stderr.buffer

    def write(stream: Any) -> Any:
        return lambda b: (stream.write(b), stream.flush())

    try:
        rc = machine.run(
            " ".join(shlex.quote(c) for c in command),
            env={"CLOUDGPU_INSTANCE": inst.id, "CLOUDGPU_JOB": jrec.id},
            on_stdout=write(out),
            on_stderr=write(err),
        )
    finally:
        machine.close()
    if rc:
        sys.exit(rc)
