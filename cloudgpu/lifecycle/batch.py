"""The run of a job on a batch provider (``Capabilities.batch``: Kaggle kernels).

There is nothing to connect to: the provider already holds the whole job
(:class:`cloudgpu.batch.BatchJob`, passed to create()). This module waits for the
submission to end while the watcher enforces the limits, prints the log the provider
kept, and brings each declared output back. Outputs are written to a new temporary
folder beside the destination and moved into place file by file only once the whole
tree has arrived, so a failed download never replaces or truncates what the user had.
It never branches on a provider's name.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import cast

from cloudgpu.batch import BatchData, BatchJob, BatchProvider, BatchResult
from cloudgpu.errors import CloudGPUError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import Provisioned
from cloudgpu.lifecycle.stage import local_source
from cloudgpu.provider import Instance, InstanceState
from cloudgpu.remote.machine import EXIT_STOPPED
from cloudgpu.spec.model import JobSpec

POLL_S = 5.0  # the slowest status poll; the first ones come faster (short runs, tests)
MAX_SESSIONS = 20  # sessions one job may chain through its checkpoint

# Provisions the next session of the same offer, starting from the given one's checkpoint.
NextSession = Callable[[Provisioned], Provisioned]


def batch_job(job: JobSpec, job_id: str) -> BatchJob:
    """The job as a batch provider receives it; local data paths made absolute."""
    data = tuple(
        BatchData(d.src if "://" in d.src else str(local_source(job, d.src).resolve()), d.dst)
        for d in job.data
    )
    return BatchJob(
        job_id=job_id,
        setup=job.setup,
        run=job.run,
        env=dict(job.env),
        data=data,
        outputs=tuple(o.src for o in job.outputs),
        checkpoint=job.checkpoint or "",
        timeout_s=job.limits.max_runtime_s,
    )


def wait_ended(deps: Deps, got: Provisioned, stop: threading.Event, poll_s: float) -> Instance:
    """Poll until the submission has ended (STOPPED or gone) or ``stop`` is set."""
    inst = got.instance
    step = min(0.2, poll_s)
    while inst.state in (InstanceState.PENDING, InstanceState.RUNNING, InstanceState.STOPPING):
        if stop.wait(step):
            return inst
        step = min(step * 1.5, poll_s)
        try:
            inst = got.provider.describe(inst.id)
        except CloudGPUError as exc:  # a failed poll is retried, never fatal
            deps.sink.info(f"status of {inst.id} unknown for now: {exc}")
    return inst


def run_batch(
    deps: Deps,
    got: Provisioned,
    job: JobSpec,
    stop: threading.Event,
    set_state: Callable[[str], None],
    next_session: NextSession | None = None,
    poll_s: float = POLL_S,
) -> int:
    """Wait for the run, show its log, collect its outputs; return its exit status.

    A run the provider stopped at its session limit continues in a next session from
    its checkpoint (``next_session``), when the job has one; outputs come from the last.
    """
    set_state(states.RUNNING)
    for session in range(1, MAX_SESSIONS + 1):
        deps.sink.info(
            f"run: submitted to {got.offer.provider} as {got.instance.id}"
            f"{f' (session {session})' if session > 1 else ''}; "
            "its log arrives when the run ends (no live log on this provider)"
        )
        inst = wait_ended(deps, got, stop, poll_s)
        if stop.is_set():
            return EXIT_STOPPED
        if inst.state.is_gone:
            deps.sink.info(f"{inst.id} is gone: its log and outputs went with it")
            return 1
        provider = cast(BatchProvider, got.provider)
        result = provider.batch_result(inst)
        _show(deps, result)
        if not (result.timed_out and job.checkpoint and next_session):
            break
        deps.sink.info(f"continuing from the checkpoint in session {session + 1}")
        got.instance = inst
        got = next_session(got)
    if job.outputs:
        set_state(states.COLLECTING)
        for out in job.outputs:
            collect_one(deps, provider, inst, out.src, local_source(job, out.dst))
    return result.exit_code


def _show(deps: Deps, result: BatchResult) -> None:
    if result.log:
        deps.sink.job_output(result.log)
    if result.detail:
        deps.sink.info(result.detail)
    if result.timed_out:
        deps.sink.info("the run was stopped at the provider's session limit")


def collect_one(deps: Deps, provider: BatchProvider, inst: Instance, src: str, dst: Path) -> None:
    """One output tree into ``dst``, through a temporary folder beside it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.cloudgpu-", dir=dst.parent))
    try:
        received = provider.fetch_output(inst, src, tmp / "tree")
        files = _move_into(tmp / "tree", dst)
        deps.sink.info(f"{src} -> {dst}: {files} file(s), {received} B")
    except CloudGPUError as exc:
        deps.sink.info(f"output {src} not collected: {exc}")
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _move_into(tree: Path, dst: Path) -> int:
    """Move every file of ``tree`` to the same place under ``dst`` (renames on one file
    system: each destination file is replaced whole or not at all)."""
    if not tree.is_dir():
        return 0
    moved = 0
    for root, _dirs, files in os.walk(tree):
        rel = Path(root).relative_to(tree)
        target_dir = dst / rel
        if target_dir.is_symlink():
            raise CloudGPUError(f"{target_dir} is a symlink: not writing through it")
        target_dir.mkdir(parents=True, exist_ok=True)
        for name in files:
            os.replace(Path(root, name), target_dir / name)
            moved += 1
    return moved
