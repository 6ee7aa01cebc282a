"""Move a job's files: data onto the instance's NVMe, checkpoints both ways, outputs back.

Local directories go through Machine.put_dir (one stream, unchanged files skipped,
integrity checked). Remote sources (``s3://``, ``gs://``, ``az://``, ``https://``) are
pulled by the instance itself with URLs this machine signs (cloudgpu.data.pull), and
outputs bound for ``s3://``, ``gs://``, ``az://`` are uploaded by the instance itself
(cloudgpu.data.push): their bytes never pass through here. Progress goes to the sink.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cloudgpu.data import instance, pull, push, uri
from cloudgpu.data import probe as probing
from cloudgpu.data.select import Selector, selector_for
from cloudgpu.data.stores import open_destination, open_store
from cloudgpu.errors import CloudGPUError, ConfigError, NotFoundError, RemoteError
from cloudgpu.lifecycle.output import Sink, human_bytes
from cloudgpu.remote import Machine, MissingSource, ProgressFn, TransferStats
from cloudgpu.remote.machine import ExcludeFn
from cloudgpu.spec.model import DataItem, JobSpec, OutputItem

# pack: true: a local tree goes as this many shards, each unpacked by its own agent there.
PACK_STREAMS = 4


def on_instance(machine: Machine, path: str) -> str:
    """A job path on the instance: ``/nvme/...`` means wherever its NVMe is mounted."""
    if path == "/nvme" or path.startswith("/nvme/"):
        return machine.nvme_path.rstrip("/") + path[len("/nvme") :]
    return path


def local_source(job: JobSpec, src: str) -> Path:
    return Path(job.base_dir or ".", os.path.expanduser(src))


def bar(sink: Sink, label: str) -> ProgressFn:
    """A progress callback drawing ``label``'s bar on the sink."""

    def progress(done: int, total: int) -> None:
        sink.progress(label, done, total)

    return progress


def stage_data(
    machine: Machine, job: JobSpec, sink: Sink, cache_dir: Path, env: Mapping[str, str]
) -> TransferStats:
    total = TransferStats()
    for item in job.data:
        if uri.is_remote(item.src):
            total = total.add(pull_remote(machine, job, item, sink, env))
            continue
        src = local_source(job, item.src)
        label = f"staging {item.src} -> {item.dst}"
        if src.is_dir():
            where = on_instance(machine, item.dst)
            exclude = local_excludes(job, item, src)
            streams = PACK_STREAMS if item.pack else 1
            stats = machine.put_dir(
                src, where, progress=bar(sink, label), exclude=exclude, streams=streams
            )
        else:
            stats = machine.put_file(src, on_instance(machine, item.dst), progress=bar(sink, label))
        sink.info(
            f"{item.dst}: {stats.files_sent} file(s) sent ({human_bytes(stats.bytes_sent)}), "
            f"{stats.files_skipped} unchanged"
        )
        total = total.add(stats)
    return total


def local_excludes(job: JobSpec, item: DataItem, src: Path) -> ExcludeFn | None:
    """What a local tree leaves out: the job directory's and the tree's own
    .cloudgpuignore, then the item's ``exclude:`` (the same matcher as remote sources)."""
    try:
        selector = selector_for(item.exclude, Path(job.base_dir or "."), src)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return selector.excluded if selector else None


def pull_remote(
    machine: Machine, job: JobSpec, item: DataItem, sink: Sink, env: Mapping[str, str]
) -> TransferStats:
    """Have the instance pull one remote source; report objects/s and bytes/s."""
    try:
        selector = selector_for(item.exclude, Path(job.base_dir or "."))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    source = uri.parse(item.src)
    store = open_store(source, env)
    listing = pull.list_source_with(source, store, selector)
    for note in listing.notes:
        sink.info(f"{source}: {note}")
    excluded = f", {listing.excluded} excluded" if listing.excluded else ""
    sink.info(
        f"{source}: {len(listing.objects)} object(s), {human_bytes(listing.bytes)}{excluded}; "
        "pulling on the instance"
    )
    dest = on_instance(machine, item.dst)
    stats = pull.pull(
        machine,
        listing,
        store,
        dest,
        progress=bar(sink, f"pulling {source} -> {item.dst}"),
        workers=item.workers or pull.DEFAULT_WORKERS,
        ca_pem=instance.trusted_ca(env),
    )
    resumed = f", {human_bytes(stats.resumed_bytes)} resumed" if stats.resumed_bytes else ""
    sink.info(
        f"{item.dst}: {stats.objects} object(s) pulled ({human_bytes(stats.bytes)}{resumed}), "
        f"{stats.skipped} unchanged; {stats.objects_per_s:,.0f} objects/s, "
        f"{human_bytes(stats.bytes_per_s)}/s"
    )
    return TransferStats(
        files_sent=stats.objects,
        bytes_sent=stats.bytes,
        files_skipped=stats.skipped,
        bytes_skipped=stats.skipped_bytes,
        seconds=stats.seconds,
    )


def probe_line(
    machine: Machine, job: JobSpec, gpus: int, sink: Sink, tokens_per_s: float | None = None
) -> dict[str, object] | None:
    """The launch's one data-probe line. The quick disk probe (~4 s) runs when it can
    decide something: the workload states its consumption (or the plan estimated its
    ``tokens_per_s`` on this machine), or data comes from an object store; otherwise the
    line says how to measure. Never fatal."""
    need = probing.need_of(job.workload, gpus, tokens_per_s)
    if need.samples_per_s <= 0 and not any(uri.is_remote(d.src) for d in job.data):
        # Nothing was measured: a line for the log (and -v), not for every launch's screen.
        sink.info(
            "data probe: not run (no workload.samples_per_s); `cloudgpu data probe JOB`",
            detail=True,
        )
        return None
    try:
        result = probing.run_probe(machine, quick=True, gpu=False)
    except RemoteError as exc:
        sink.info(f"data probe skipped: {exc}")
        return None
    v = probing.verdict(result, need)
    sink.info(f"data probe: {probing.summary(result)}; {v.headline}")
    for advice in v.advice:
        sink.info(f"data probe advice: {advice}")
    return result


def checkpoint_dir(data_dir: Path, job_id: str) -> Path:
    return data_dir / "checkpoints" / job_id


def flush_checkpoint(
    machine: Machine, job: JobSpec, local: Path, sink: Sink, env: Mapping[str, str]
) -> bool:
    """Bring the checkpoint dir back (or have the instance upload it to the job's
    ``checkpoint.dst`` store); False when there is none yet or it could not be saved."""
    if not job.checkpoint:
        return False
    if job.checkpoint_dst:
        try:
            push_output(machine, OutputItem(job.checkpoint, job.checkpoint_dst), sink, env)
        except CloudGPUError as exc:
            sink.info(f"checkpoint {job.checkpoint} not saved to {job.checkpoint_dst}: {exc}")
            return False
        return True
    try:
        stats = machine.get_dir(on_instance(machine, job.checkpoint), local)
    except RemoteError as exc:
        sink.info(f"checkpoint {job.checkpoint} not saved: {exc}")
        return False
    sink.info(f"checkpoint {job.checkpoint} saved: {stats.files_sent} file(s) to {local}")
    return True


def restore_checkpoint(
    machine: Machine, job: JobSpec, local: Path, sink: Sink, env: Mapping[str, str]
) -> None:
    """Put the saved checkpoint on a new instance: pulled by the instance from the
    job's ``checkpoint.dst`` store, or sent from this machine's copy."""
    if not job.checkpoint:
        return
    if job.checkpoint_dst:
        src = uri.parse(job.checkpoint_dst)
        store = open_store(src, env)
        try:
            listing = pull.list_source_with(src, store, Selector())
        except NotFoundError:
            sink.info(f"no checkpoint in {src} yet: starting without one")
            return
        where = on_instance(machine, job.checkpoint)
        restoring = bar(sink, f"restoring {src}")
        ca = instance.trusted_ca(env)
        got = pull.pull(machine, listing, store, where, progress=restoring, ca_pem=ca)
        sink.info(f"checkpoint restored to {job.checkpoint} from {src}: {got.objects} object(s)")
        return
    if not local.is_dir():
        return
    stats = machine.put_dir(local, on_instance(machine, job.checkpoint))
    sink.info(f"checkpoint restored to {job.checkpoint}: {stats.files_sent} file(s)")


def collect_outputs(
    machine: Machine, job: JobSpec, sink: Sink, env: Mapping[str, str]
) -> list[str]:
    """Bring every output back (or have the instance upload it to its object store);
    return the ones the instance does not have (not fatal). Any other failure raises:
    the outputs are still there and must not be given up (cloudgpu.lifecycle.collect
    retries, then keeps the instance)."""
    problems = []
    for out in job.outputs:
        if uri.is_remote(out.dst):
            try:
                push_output(machine, out, sink, env)
            except MissingSource as exc:
                problems.append(f"{out.src}: {exc}")
                sink.info(f"output {out.src} not uploaded: {exc}")
            continue
        dst = local_source(job, out.dst)
        label = f"collecting {out.src} -> {dst}"
        try:
            stats = machine.get_dir(on_instance(machine, out.src), dst, progress=bar(sink, label))
        except MissingSource as exc:
            problems.append(f"{out.src}: {exc}")
            sink.info(f"output {out.src} not collected: {exc}")
            continue
        sink.info(
            f"{out.src} -> {dst}: {stats.files_sent} file(s), {human_bytes(stats.bytes_sent)}"
        )
    return problems


def push_output(
    machine: Machine, out: OutputItem, sink: Sink, env: Mapping[str, str]
) -> push.PushStats:
    """Have the instance upload one output tree to its object store. Failures other
    than a missing directory raise: the outputs are still on the instance."""
    dest = uri.parse(out.dst)
    store = open_destination(dest, env)
    stats = push.push(
        machine,
        on_instance(machine, out.src),
        dest,
        store,
        progress=bar(sink, f"uploading {out.src} -> {dest}"),
        hashing=bar(sink, f"checksumming {out.src}"),
        ca_pem=instance.trusted_ca(env),
    )
    for note in stats.notes:
        sink.info(f"output {out.src}: {note}")
    resumed = f", {human_bytes(stats.resumed_bytes)} resumed" if stats.resumed_bytes else ""
    sink.info(
        f"{out.src} -> {dest}: {stats.objects} object(s) uploaded by the instance "
        f"({human_bytes(stats.bytes)}{resumed}), {stats.skipped} already there; "
        f"{human_bytes(stats.bytes_per_s)}/s"
    )
    return stats
