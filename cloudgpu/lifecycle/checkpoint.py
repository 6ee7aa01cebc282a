"""The checkpoint directory, synced back while the job runs.

A preemption notice gives time to flush the checkpoint; a preemption without one (Vast
never warns, a short notice can be missed) gives none. So while the job runs its
checkpoint dir is brought back every ``checkpoint.sync_every`` (default 5 min) over
the job's own connection (or, with ``checkpoint.dst``, uploaded by the instance to that
object store, incrementally): a lost instance costs at most one interval of work. Each sync
is incremental and atomic per sync (cloudgpu.remote.agent): a sync cut short, or one
that fails, leaves the previous good local checkpoint as it was.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from cloudgpu.lifecycle.output import Sink
from cloudgpu.lifecycle.stage import flush_checkpoint
from cloudgpu.remote import Machine
from cloudgpu.spec.model import JobSpec


class Syncer:
    """Flushes the checkpoint every ``job.checkpoint_every_s`` until stopped."""

    def __init__(
        self, machine: Machine, job: JobSpec, local: Path, sink: Sink, env: Mapping[str, str]
    ) -> None:
        self.machine, self.job, self.local, self.sink = machine, job, local, sink
        self.env = env  # signs the uploads when the checkpoint lives in an object store
        self.syncs = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Syncer:
        if self.job.checkpoint and self.job.checkpoint_every_s > 0:
            self._thread = threading.Thread(
                target=self._loop, name="cloudgpu-checkpoint", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._done.wait(self.job.checkpoint_every_s):
            try:
                if flush_checkpoint(self.machine, self.job, self.local, self.sink, self.env):
                    self.syncs += 1
            except Exception as exc:  # never fatal to the job: the next sync retries
                self.sink.info(f"checkpoint sync failed: {type(exc).__name__}: {exc}")
