"""`cloudgpu status | logs | down | ssh | exec`: look at and act on launched jobs.

`status` reads only the state store (never a provider). `down` stops a job's lifecycle
process and tears its instances down; `down --orphans` sweeps tagged instances no live
job owns. Thin: the work is in cloudgpu.lifecycle.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
from typing import Any

import click
from click.shell_completion import CompletionItem

from cloudgpu import remote
from cloudgpu.cli import style
from cloudgpu.cli.context import App, get_app
from cloudgpu.costs import billing
from cloudgpu.data.probeview import summary as probe_summary
from cloudgpu.errors import CloudGPUError, ConfigError, StateError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.collect import instance_of
from cloudgpu.lifecycle.deps import Deps, build_deps
from cloudgpu.lifecycle.output import PREFIX
from cloudgpu.lifecycle.reaper import ACTIVITY
from cloudgpu.lifecycle.refresh import refresh_job, unconfirmed
from cloudgpu.sshkeys import ensure_keypair
from cloudgpu.state import probes
from cloudgpu.state.store import InstanceRecord, JobRecord, Store
from cloudgpu.texttable import render_table, terminal_width


class _EchoSink:
    """Lifecycle messages of `down` go to the terminal (stderr)."""

    def info(self, message: str, *, detail: bool = False) -> None:
        if not detail:
            click.echo(PREFIX + message, err=True)

    def job_output(self, data: bytes, *, stderr: bool = False) -> None:
        click.echo(data.decode(errors="replace"), nl=False, err=stderr)

    def progress(self, label: str, done: int, total: int) -> None:
        return None


def lifecycle_deps(app: App, store: Store) -> Deps:
    return build_deps(store=store, registry=app.registry, sink=_EchoSink())


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


def job_dict(
    store: Store, job: JobRecord, now: float, caps_of: billing.CapsOf, events: bool = False
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "provider": job.provider,
        "instance_type": job.instance_type,
        "cost": round(billing.job_cost(store, job.id, now, caps_of).total, 6),
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
        d["probes"] = [
            {
                "measured_at": p.measured_at,
                "instance_type": p.instance_type,
                "summary": probe_summary(p.result),
                "result": p.result,
            }
            for p in probes.probes(store, job.id)
        ]
        d["events"] = [
            {"ts": e["ts"], "kind": e["kind"], "message": e["message"]}
            for e in store.events(job.id)
        ]
    return d


@click.command("status")
@click.argument("job", required=False, shell_complete=complete_job)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--refresh", is_flag=True,
    help="Ask the providers about instances the store believes live (slower).",
)  # fmt: skip
def status(job: str | None, as_json: bool, refresh: bool) -> None:
    """Jobs and their instances (from the local state store); JOB shows its history.

    Plain `status` never asks a provider: a state marked `?` is one the store cannot
    vouch for (its client is gone, or nothing confirmed it within a lease); `--refresh`
    asks, and records what stopped with its spend up to then."""
    app = get_app()
    store = app.store()
    jobs = [store.find_job(job)] if job else store.jobs()
    if refresh:
        deps = lifecycle_deps(app, store)
        for j in jobs:
            if store.instances(j.id, live_only=True):
                for note in refresh_job(deps, j):
                    click.echo(f"{PREFIX}{j.id}: {note}", err=True)
        jobs = [store.job(j.id) for j in jobs]
    now = time.time()
    caps_of = app.registry.capabilities
    host = socket.gethostname()
    rows = [job_dict(store, j, now, caps_of, events=bool(job)) for j in jobs]
    for r, j in zip(rows, jobs, strict=True):
        r["unconfirmed"] = unconfirmed(j, now, host)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no jobs yet: `cloudgpu launch job.yaml`")
        return
    cells = [
        [
            r["id"],
            r["state"] + ("?" if r["unconfirmed"] else ""),
            r["provider"] or "-",
            r["instance_type"] or "-",
            "$" + format(r["cost"], ".4f"),
            ", ".join(f"{i['provider_id'] or i['id']}:{i['state']}" for i in r["instances"]) or "-",
        ]
        for r in rows
    ]
    headers = ["JOB", "STATE", "PROVIDER", "TYPE", "COST", "INSTANCES"]
    for line in render_table(
        headers, cells, right={4}, width=terminal_width(), paint={1: style.state}
    ):
        click.echo(line)
    if any(r["unconfirmed"] for r in rows):
        click.echo("? not confirmed lately (client gone, or a kept instance may have stopped):")
        click.echo("  `cloudgpu status --refresh` asks the providers")
    for r in rows:
        for e in r.get("events", []):
            stamp = time.strftime("%H:%M:%S", time.localtime(e["ts"]))
            click.echo(f"  {stamp} {e['kind']:<20} {e['message']}")
        for p in r.get("probes", []):
            stamp = time.strftime("%H:%M:%S", time.localtime(p["measured_at"]))
            click.echo(f"  {stamp} data probe ({p['instance_type']}): {p['summary']}")


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
    inst = instance_of(rec)
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
    inst = instance_of(rec)
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
