"""Move a job's files: data onto the instance's NVMe, checkpoints both ways, outputs back.

Local directories go through Machine.put_dir (one stream, unchanged files skipped,
integrity checked); ``s3://`` sources are first mirrored into the cache dir with boto3
(cloudgpu.lifecycle.s3) and then sent the same way. Progress goes to the sink.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cloudgpu.errors import RemoteError
from cloudgpu.lifecycle import s3
from cloudgpu.lifecycle.output import Sink, human_bytes
from cloudgpu.remote import Machine, ProgressFn, TransferStats
from cloudgpu.spec.model import JobSpec


def on_instance(machine: Machine, path: str) -> str:
    """A job path on the instance: ``/nvme/...`` means wherever its NVMe is mounted."""
    if path == "/nvme" or path.startswith("/nvme/"):
        return machine.nvme_path.rstrip("/") + path[len("/nvme") :]
    return path


def local_source(job: JobSpec, src: str) -> Path:
    return Path(job.base_dir or ".", os.path.expanduser(src))


def s3_cache_dir(cache_dir: Path, uri: str) -> Path:
    bucket, prefix = s3.split_uri(uri)
    return cache_dir / "s3" / bucket / (prefix.strip("/") or "_root")


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
        if item.src.startswith("s3://"):
            src = s3_cache_dir(cache_dir, item.src)
            got = s3.pull(item.src, src, env, bar(sink, f"pulling {item.src}"))
            sink.info(f"{item.src}: {human_bytes(got)} downloaded (cache {src})")
        else:
            src = local_source(job, item.src)
        label = f"staging {item.src} -> {item.dst}"
        if src.is_dir():
            stats = machine.put_dir(src, on_instance(machine, item.dst), progress=bar(sink, label))
        else:
            stats = machine.put_file(src, on_instance(machine, item.dst), progress=bar(sink, label))
        sink.info(
            f"{item.dst}: {stats.files_sent} file(s) sent ({human_bytes(stats.bytes_sent)}), "
            f"{stats.files_skipped} unchanged"
        )
        total = total.add(stats)
    return total


def checkpoint_dir(data_dir: Path, job_id: str) -> Path:
    return data_dir / "checkpoints" / job_id


def flush_checkpoint(machine: Machine, job: JobSpec, local: Path, sink: Sink) -> bool:
    """Bring the checkpoint dir back; False when there is none yet."""
    if not job.checkpoint:
        return False
    try:
        stats = machine.get_dir(on_instance(machine, job.checkpoint), local)
    except RemoteError as exc:
        sink.info(f"checkpoint {job.checkpoint} not saved: {exc}")
        return False
    sink.info(f"checkpoint {job.checkpoint} saved: {stats.files_sent} file(s) to {local}")
    return True


def restore_checkpoint(machine: Machine, job: JobSpec, local: Path, sink: Sink) -> None:
    if not job.checkpoint or not local.is_dir():
        return
    stats = machine.put_dir(local, on_instance(machine, job.checkpoint))
    sink.info(f"checkpoint restored to {job.checkpoint}: {stats.files_sent} file(s)")


def collect_outputs(machine: Machine, job: JobSpec, sink: Sink) -> list[str]:
    """Bring every output back; return the problems (an output missing is not fatal)."""
    problems = []
    for out in job.outputs:
        dst = local_source(job, out.dst)
        label = f"collecting {out.src} -> {dst}"
        try:
            stats = machine.get_dir(on_instance(machine, out.src), dst, progress=bar(sink, label))
        except RemoteError as exc:
            problems.append(f"{out.src}: {exc}")
            sink.info(f"output {out.src} not collected: {exc}")
            continue
        sink.info(
            f"{out.src} -> {dst}: {stats.files_sent} file(s), {human_bytes(stats.bytes_sent)}"
        )
    return problems
