"""Stopping jobs and sweeping orphans: what `cloudgpu down` does.

A job whose lifecycle process is alive is asked to stop with SIGTERM (it collects its
outputs and tears down its own instance, as on Ctrl-C); whatever is still live afterwards
is torn down from here, after collecting the job's declared outputs from instances that
answer (``collect``: None = if reachable, True = required, False = skip).

The orphan sweep lists every enabled provider's instances and other resources carrying
this store's owner id (never anyone else's: the id is random per CLOUDGPU_HOME) and
removes those no live job holds. Liveness comes from the store when the job's process
runs on this host; otherwise (another host sharing the home, an unknown job) from the
instance's lease tag, which a running lifecycle keeps renewing: a fresh lease is left
alone unless ``force``. Store records whose instance is gone are settled.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from cloudgpu.errors import CloudGPUError, RemoteError, StateError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.collect import collect, declared, instance_of, node_outputs
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import NODE_RANK_TAG
from cloudgpu.lifecycle.teardown import teardown_instance, teardown_job
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_LEASE,
    TAG_OWNER,
    Instance,
    Leftover,
    Provider,
)
from cloudgpu.remote import Machine
from cloudgpu.sshkeys import ensure_keypair
from cloudgpu.state.store import InstanceRecord, JobRecord

STOP_WAIT_S = 120.0  # for the lifecycle process to stop (longer while it collects)
COLLECT_WAIT_S = 3600.0


def down_job(
    deps: Deps, job: JobRecord, wait_s: float = STOP_WAIT_S, collect: bool | None = None
) -> list[str]:
    """Stop ``job``, collect its outputs, tear its instances down; return failures."""
    if job.state in states.ACTIVE and job.pid != os.getpid() and _here(job):
        _stop_process(deps, job, wait_s)
    failures = []
    held = False
    if collect is not False:
        for rec in deps.store.instances(job.id, live_only=True):
            rank = rec.tags.get(NODE_RANK_TAG)
            why = _collect_from(deps, deps.store.job(job.id), instance_of(rec), rank)
            if why and collect:
                failures.append(f"{rec.provider_id}: {why}; instance kept")
                held = True
    if not held:
        failures += teardown_job(deps, job.id)
    if not held and deps.store.job(job.id).state not in states.FINAL:
        deps.store.update_job(job.id, state=states.STOPPED, error="stopped by `cloudgpu down`")
    deps.store.add_event(job.id, "down", "; ".join(failures) or "ok")
    return failures


def _here(job: JobRecord) -> bool:
    return (not job.host or job.host == socket.gethostname()) and states.pid_alive(job.pid)


def _stop_process(deps: Deps, job: JobRecord, wait_s: float) -> None:
    """SIGTERM the lifecycle process; wait while it stops (longer while it collects)."""
    assert job.pid is not None
    deps.sink.info(f"stopping the lifecycle process of {job.id} (pid {job.pid})")
    try:
        os.kill(job.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    waited = 0.0
    while states.pid_alive(job.pid):
        collecting = deps.store.job(job.id).state == states.COLLECTING
        if waited >= (COLLECT_WAIT_S if collecting else wait_s):
            return
        deps.sleep(0.2)
        waited += 0.2


def _rank(deps: Deps, record_id: str) -> str | None:
    """The node rank the instance record ``record_id`` keeps (multi-node jobs)."""
    try:
        return deps.store.instance(record_id).tags.get(NODE_RANK_TAG) if record_id else None
    except StateError:
        return None


def _collect_from(
    deps: Deps, job: JobRecord, inst: Instance, rank: str | None = None
) -> str | None:
    """Fetch ``job``'s declared outputs from ``inst`` (node ``rank`` of a multi-node
    job: its share, as the lifecycle collects it); the reason when they were not."""
    spec = declared(job)
    if rank is not None and rank.isdigit():
        spec = replace(spec, outputs=node_outputs(spec.outputs, int(rank)))
    if not spec.outputs or not inst.id:
        return None
    key = None if inst.ssh is None or inst.ssh.key_file else ensure_keypair(deps.paths.keys_dir)[0]

    def connect() -> Machine:
        return deps.connect(inst, known_hosts=deps.known_hosts, key_file=key, timeout=30)

    try:
        machine = connect()
    except RemoteError as exc:
        deps.sink.info(f"outputs of {job.id} not collected: instance not reachable ({exc})")
        return f"not reachable ({exc})"
    deps.sink.info(f"collecting the outputs of {job.id} from {inst.id} first")
    try:
        machine, _ = collect(
            machine, spec, deps.sink, connect, deps.sleep, attempts=2, env=deps.env
        )
    except RemoteError as exc:
        deps.sink.info(f"outputs of {job.id} not collected: {exc}")
        return str(exc)
    finally:
        machine.close()
    return None


def purge_job(deps: Deps, job: JobRecord) -> list[InstanceRecord]:
    """Stop tracking ``job`` without asking its provider (gone, unreachable, or its
    plugin uninstalled): its live instance records become ``purged`` and the job
    ``stopped``. Returns those records: whatever they stood for may still be billing.
    Refused while the job's own lifecycle process is alive (`down JOB` stops that)."""
    if job.state in states.ACTIVE and job.pid != os.getpid() and states.pid_alive(job.pid):
        raise StateError(
            f"job {job.id} is still driven by its process (pid {job.pid})",
            hint=f"`cloudgpu down {job.id}` stops it and tears it down",
        )
    live = deps.store.instances(job.id, live_only=True)
    now = deps.clock()
    for rec in live:
        deps.store.update_instance(rec.id, state=states.I_PURGED, terminated_at=now)
        what = f"{rec.provider} {rec.provider_id or '(id never recorded)'}"
        deps.store.add_event(job.id, "instance_purged", f"{what}: may still bill", rec.id)
    if job.state not in states.FINAL:
        deps.store.update_job(
            job.id, state=states.STOPPED, error="purged by `cloudgpu down --purge`"
        )
    deps.store.add_event(job.id, "purged", f"{len(live)} instance record(s) dropped")
    return live


@dataclass
class Sweep:
    """What `down --orphans` found: to remove, left alone (and why), unlistable."""

    instances: list[tuple[Provider, Instance]] = field(default_factory=list)
    leftovers: list[tuple[Provider, Leftover]] = field(default_factory=list)
    records: list[InstanceRecord] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"{p.name} instance {i.id} (job {_of(i.tags)})" for p, i in self.instances]
        out += [f"{p.name} {x.kind} {x.id} (job {_of(x.tags)})" for p, x in self.leftovers]
        return out + [f"record {r.id} of job {r.job_id}" for r in self.records]


def _of(tags: Mapping[str, str]) -> str:
    return tags.get(TAG_JOB, "?")


def _held(deps: Deps, tags: Mapping[str, str], now: float, force: bool) -> str | None:
    """Why the resource carrying ``tags`` must be left alone, or None: it is an orphan."""
    job = _job(deps, tags.get(TAG_JOB, ""))
    if job is not None:
        live = states.holder(job, socket.gethostname())
        if live is not None:
            return f"job {job.id} is {job.state}" if live else None
    if force:
        return None
    try:
        lease = float(tags.get(TAG_LEASE) or tags.get(TAG_EXPIRES) or 0)
    except ValueError:
        lease = 0.0
    if lease > now:
        return f"its lease is held until {lease:.0f} by a client this store cannot see (--force)"
    return None


def find_orphans(deps: Deps, providers: Sequence[Provider], *, force: bool = False) -> Sweep:
    """Everything tagged with this store's owner id that no live job holds."""
    found = Sweep()
    now = deps.clock()
    mine = {TAG_OWNER: deps.owner}
    for provider in providers:
        try:
            insts = provider.list_instances(mine)
        except CloudGPUError as exc:
            found.failures.append(f"{provider.name}: cannot list instances: {exc}")
            continue
        try:
            extra = provider.leftovers(mine)
        except CloudGPUError as exc:  # instances are still swept; the rest next time
            found.failures.append(f"{provider.name}: cannot list other resources: {exc}")
            extra = []
        for inst in insts:
            why = _held(deps, inst.tags, now, force)
            if why:
                found.skipped.append(f"{provider.name} {inst.id}: {why}")
            else:
                found.instances.append((provider, inst))
        busy = {i.tags.get(TAG_JOB) for i in insts} - {
            i.tags.get(TAG_JOB) for _, i in found.instances
        }
        for item in extra:  # only once nothing of that job is left running
            if item.tags.get(TAG_JOB) not in busy and not _held(deps, item.tags, now, force):
                found.leftovers.append((provider, item))
    for rec in deps.store.instances(live_only=True):
        job = _job(deps, rec.job_id)
        if job is None or states.holder(job, socket.gethostname()) is False:
            found.records.append(rec)
    return found


def remove_orphans(
    deps: Deps, sweep: Sweep, *, collect: bool = True
) -> tuple[list[str], list[str]]:
    """Remove what ``sweep`` found; returns (removed, failures), one line each."""
    removed: list[str] = []
    failures = list(sweep.failures)
    for provider, inst in sweep.instances:
        job = _job(deps, inst.tags.get(TAG_JOB, ""))
        if collect and job is not None:
            _collect_from(deps, job, inst, _rank(deps, inst.tags.get(TAG_INSTANCE, "")))
        try:
            provider.terminate(inst.id)
            _settle(deps, inst.tags.get(TAG_INSTANCE, ""))
        except CloudGPUError as exc:
            failures.append(f"{provider.name} {inst.id}: not removed: {exc}")
            continue
        removed.append(f"{provider.name} {inst.id} (job {_of(inst.tags)})")
    for provider, item in sweep.leftovers:
        try:
            provider.remove_leftover(item)
        except CloudGPUError as exc:
            failures.append(f"{provider.name} {item.kind} {item.id}: not removed: {exc}")
            continue
        removed.append(f"{provider.name} {item.kind} {item.id} (job {_of(item.tags)})")
    for rec in sweep.records:
        rec = deps.store.instance(rec.id)
        if rec.state in states.I_LIVE_EXCLUDE:
            continue  # settled above, with its instance
        try:
            teardown_instance(deps, rec)
        except CloudGPUError as exc:
            failures.append(f"{rec.provider} {rec.provider_id or rec.id}: {exc}")
            continue
        removed.append(f"record {rec.id} of job {rec.job_id} settled")
        _finish_job(deps, rec.job_id)
    return removed, failures


def sweep_orphans(deps: Deps, providers: Sequence[Provider], *, force: bool = False) -> list[str]:
    """Find and remove orphans at once (no confirmation); the lines removed."""
    removed, failures = remove_orphans(deps, find_orphans(deps, providers, force=force))
    for line in failures:
        deps.sink.info(line)
    return removed


def _job(deps: Deps, job_id: str) -> JobRecord | None:
    try:
        return deps.store.job(job_id) if job_id else None
    except StateError:
        return None


def _settle(deps: Deps, rec_id: str) -> None:
    try:
        rec = deps.store.instance(rec_id)
    except StateError:
        return
    if rec.state not in states.I_LIVE_EXCLUDE:
        teardown_instance(deps, rec)
    _finish_job(deps, rec.job_id)


def _finish_job(deps: Deps, job_id: str) -> None:
    try:
        job = deps.store.job(job_id)
    except StateError:
        return
    if job.state not in states.FINAL:
        deps.store.update_job(
            job_id, state=states.FAILED, error="client gone; instance removed by `down --orphans`"
        )
