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
from click.shell_completion import CompletionItem

from cloudgpu import remote
from cloudgpu.cli import style
from cloudgpu.cli.context import App, get_app
from cloudgpu.errors import CloudGPUError, ConfigError, RemoteError, StateError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.down import down_job, purge_job, sweep_orphans
from cloudgpu.lifecycle.launch import owner
from cloudgpu.lifecycle.output import PREFIX
from cloudgpu.lifecycle.reaper import ACTIVITY
from cloudgpu.provider import Instance, InstanceState, SSHTarget
from cloudgpu.sshkeys import ensure_keypair
from cloudgpu.state.store import InstanceRecord, JobRecord, Store


class _EchoSink:
    """Lifecycle messages of `down` go to the terminal (stderr)."""

    def info(self, message: str, *, detail: bool = False) -> None:
        if not detail:
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


def complete_job(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Job ids for shell completion, newest first, from the state store only (a TAB
    must never create files or wait on a provider)."""
    root = ctx.find_root().obj
    app = root if isinstance(root, App) else App()
    if not app.paths.state_db.is_file():
        return []
    try:
        store = Store.open(app.paths.state_db)
        try:
            jobs = store.jobs()
        finally:
            store.close()
    except CloudGPUError:
        return []
    return [
        CompletionItem(j.id, help=f"{j.state} {j.name}")
        for j in reversed(jobs)
        if j.id.startswith(incomplete)
    ]


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
@click.argument("job", required=False, shell_complete=complete_job)
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
            f"{r['id']:<28} {style.state(r['state'], width=13)} {r['provider'] or '-':<9} "
            f"{r['instance_type'] or '-':<20} {'$' + format(r['cost'], '.4f'):>10}  {inst or '-'}"
        )
    for r in rows:
        for e in r.get("events", []):
            stamp = time.strftime("%H:%M:%S", time.localtime(e["ts"]))
            click.echo(f"  {stamp} {e['kind']:<20} {e['message']}")


# -- logs --------------------------------------------------------------------------------


@click.command("logs")
@click.argument("job", shell_complete=complete_job)
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option(
    "--json", "as_json", is_flag=True,
    help='JSON lines: {"job", "source": "cloudgpu"|"job", "line"} per line.',
)  # fmt: skip
def logs(job: str, follow: bool, as_json: bool) -> None:
    """Show a job's log (its output and the lifecycle's messages)."""
    store = get_app().store()
    rec = store.find_job(job)
    if not rec.log_path:
        raise StateError(f"job {rec.id} has no log")
    write = _json_lines(rec.id) if as_json else _raw(sys.stdout.buffer)
    for chunk in _tail(store, rec, follow):
        write(chunk)
    write(None)


def _tail(store: Store, rec: JobRecord, follow: bool) -> Any:
    """The log's bytes as they appear; with ``follow``, until the job is over."""
    pos = 0
    while True:
        try:
            with open(rec.log_path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
        except FileNotFoundError:
            chunk = b""
        if chunk:
            pos += len(chunk)
            yield chunk
            continue
        if not follow or not _running(store.job(rec.id)):
            return
        time.sleep(0.2)


def _raw(out: Any) -> Any:
    def write(chunk: bytes | None) -> None:
        if chunk:
            out.write(chunk)
            out.flush()

    return write


def _json_lines(job_id: str) -> Any:
    """A writer turning log bytes into one JSON object per complete line (the last,
    unterminated line is flushed when the log ends: ``None``)."""
    pending = bytearray()

    def emit(raw: bytes) -> None:
        text = raw.decode(errors="replace").rstrip("\r")
        source = "cloudgpu" if text.startswith(PREFIX) else "job"
        line = text.removeprefix(PREFIX) if source == "cloudgpu" else text
        click.echo(json.dumps({"job": job_id, "source": source, "line": line}))

    def write(chunk: bytes | None) -> None:
        if chunk is None:
            if pending:
                emit(bytes(pending))
            return
        pending.extend(chunk)
        *done, rest = bytes(pending).split(b"\n")
        pending[:] = rest
        for raw in done:
            emit(raw)

    return write


def _running(job: JobRecord) -> bool:
    """More output may come: the job is under way, or its process is still tearing down."""
    if job.state in states.ACTIVE and job.pid is None:
        return True  # a detached job whose process is being started
    return states.lifecycle_running(job.pid)


# -- down --------------------------------------------------------------------------------


@click.command("down")
@click.argument("job", required=False, shell_complete=complete_job)
@click.option("--all", "all_", is_flag=True, help="Every running or kept job.")
@click.option("--orphans", is_flag=True, help="Tagged instances no live job owns.")
@click.option(
    "--purge", is_flag=True,
    help="Forget JOB's instance records without asking its provider (gone or unreachable).",
)  # fmt: skip
@click.option("--yes", "-y", is_flag=True, help="With --purge: do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def down(job: str | None, all_: bool, orphans: bool, purge: bool, yes: bool, as_json: bool) -> None:
    """Tear down a job's instances (stopping it first), all jobs, or orphans.

    `down --purge JOB` is for a record stuck because its provider is gone: it says what
    may still be billing, then drops the record without any provider call.
    """
    if sum(bool(x) for x in (job, all_, orphans)) != 1:
        raise ConfigError("give exactly one of JOB, --all or --orphans")
    if purge and not job:
        raise ConfigError("--purge needs a JOB")
    app = get_app()
    store = app.store()
    if purge:
        assert job is not None
        _purge(app, store, store.find_job(job), yes, as_json)
        return
    deps = _deps(app, store)
    result: dict[str, Any] = {"jobs": [], "orphans": [], "failures": []}
    if orphans:
        result["orphans"] = sweep_orphans(deps, _enabled(app))
    else:
        result["jobs"], result["failures"] = _down_jobs(store, deps, job)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    elif orphans:
        removed = result["orphans"]
        click.echo(f"{len(removed)} orphan(s) removed" + "".join(f"\n  {r}" for r in removed))
    else:
        for j in result["jobs"]:
            click.echo(f"{j['id']}: down" + ("" if not j["failures"] else " (teardown failed)"))
        if not result["jobs"]:
            click.echo("nothing to bring down")
    failures = result["failures"]
    if failures:
        raise RemoteError(f"{len(failures)} teardown(s) failed: {failures[0]}")


def _down_jobs(store: Store, deps: Deps, ref: str | None) -> tuple[list[Any], list[str]]:
    targets = (
        [store.find_job(ref)]
        if ref
        else [
            j
            for j in store.jobs()
            if j.state in (*states.ACTIVE, states.KEPT) or store.instances(j.id, live_only=True)
        ]
    )
    done, failures = [], []
    for j in targets:
        failed = down_job(deps, j)
        failures += failed
        done.append({"id": j.id, "state": store.job(j.id).state, "failures": failed})
    return done, failures


def _purge(app: App, store: Store, job: JobRecord, yes: bool, as_json: bool) -> None:
    """Say what may still bill, confirm, then drop the records (no provider call)."""
    now = time.time()
    live = store.instances(job.id, live_only=True)
    billing = [_may_bill(r, now) for r in live]
    for b in billing:
        click.echo(
            f"may still bill: {b['provider']} {b['provider_id'] or '(id never recorded)'} "
            f"{b['instance_type']} in {b['region'] or '?'} at ${b['price_per_hour']:.4f}/h, "
            f"up {b['hours']:.1f} h (~${b['estimated_cost']:.2f} so far); check the "
            f"{b['provider']} console and delete it there",
            err=True,
        )
    if billing and not yes:
        if not sys.stdin.isatty():
            raise ConfigError("--purge forgets instances that may still bill: confirm with --yes")
        click.confirm(f"Forget {len(billing)} instance record(s) of {job.id}?", abort=True)
    deps = _deps(app, store)
    purge_job(deps, job)
    if as_json:
        click.echo(json.dumps({"purged": job.id, "may_still_bill": billing}, indent=2))
    else:
        click.echo(f"{job.id}: purged ({len(billing)} instance record(s) dropped)")


def _may_bill(rec: InstanceRecord, now: float) -> dict[str, Any]:
    hours = max(0.0, now - rec.launched_at) / 3600 if rec.launched_at else 0.0
    return {
        "provider": rec.provider,
        "provider_id": rec.provider_id,
        "instance_type": rec.instance_type,
        "region": rec.region,
        "price_per_hour": rec.price_per_hour,
        "hours": round(hours, 3),
        "estimated_cost": round(rec.price_per_hour * hours, 4),
    }


def _enabled(app: App) -> list[Any]:
    out = []
    for name in app.registry.names():
        try:
            p = app.registry.get(name)
            av = p.availability()
            if av.enabled:
                out.append(p)
            elif av.extra:  # it may have instances, but this install cannot reach them
                click.echo(f"{PREFIX}{name}: skipped ({av.reason})", err=True)
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


def _require_shell(app: App, rec: InstanceRecord) -> None:
    """A batch provider (Kaggle) runs the job as one submission: there is no shell to
    open, and falling back to this machine's shell would be wrong."""
    if app.registry.get(rec.provider).capabilities.batch:
        raise ConfigError(
            f"{rec.provider} runs jobs as batch submissions: there is no shell on "
            f"{rec.provider_id}",
            hint="its log and outputs arrive when the run ends (`cloudgpu logs JOB`)",
        )


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
            launcher=tuple(s.get("launcher", ())),
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
@click.argument("job", shell_complete=complete_job)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(job: str, command: tuple[str, ...]) -> None:
    """Open a shell on a job's instance (`cloudgpu ssh JOB [-- CMD]`), with the system
    ssh checking the host key against cloudgpu's pins."""
    app = get_app()
    store = app.store()
    jrec, rec = _live_instance(store, job)
    _require_shell(app, rec)
    inst = to_instance(rec)
    store.add_event(jrec.id, ACTIVITY, "ssh", rec.id)
    if inst.ssh is None and not inst.workdir:  # reached through its provider's own API
        raise StateError(
            f"job {jrec.id}'s {rec.provider} instance has no SSH access",
            hint=f"`cloudgpu exec {jrec.id} -- CMD` runs commands there",
        )
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
    if inst.ssh.launcher:  # a gateway: the shell or command runs through its launcher
        command = (*inst.ssh.launcher, *(command or ("bash", "-i")))
    argv += [f"{inst.ssh.user}@{inst.ssh.host}", *command]
    sys.exit(subprocess.call(argv))


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("job", shell_complete=complete_job)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(job: str, command: tuple[str, ...]) -> None:
    """Run COMMAND on a job's instance: `cloudgpu exec JOB -- nvidia-smi`."""
    app = get_app()
    store = app.store()
    jrec, rec = _live_instance(store, job)
    _require_shell(app, rec)
    inst = to_instance(rec)
    store.add_event(jrec.id, ACTIVITY, "exec", rec.id)
    own = app.registry.get(rec.provider).open_machine(inst)
    if isinstance(own, remote.Machine):
        machine: remote.Machine = own
    else:
        key = (
            None if inst.ssh is None or inst.ssh.key_file else ensure_keypair(app.paths.keys_dir)[0]
        )
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
