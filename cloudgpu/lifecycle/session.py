"""A single-instance job's work on its instance: bootstrap and staging, then each
command (setup, run) with the checkpoint synced back while it runs.

A connection dropped under a healthy instance is made again: the (incremental) staging
resumes, and a command, which runs detached on the instance where the machine allows
(cloudgpu.remote.detached), is followed on from the byte it had reached."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cloudgpu.errors import RemoteError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.bootstrap import bootstrap
from cloudgpu.lifecycle.checkpoint import Syncer
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import Provisioned
from cloudgpu.lifecycle.stage import on_instance, probe_line, stage_data
from cloudgpu.provider import NoticeWatcher
from cloudgpu.remote import ConnectionLost, Machine, detached
from cloudgpu.spec.model import JobSpec
from cloudgpu.state import probes

PREPARE_ATTEMPTS = 3  # bootstrap + staging over a new connection after a drop
REATTACH_ATTEMPTS = 5  # follows of a detached run over new connections


@dataclass
class Session:
    """What one job's work on instance ``got`` runs with."""

    deps: Deps
    job_id: str
    job: JobSpec
    got: Provisioned
    ckpt_local: Path
    stop: threading.Event  # the watcher's: kills the command
    state: Callable[[str], None]  # the job's state, in the store
    lost: Callable[[], bool]  # after a drop: was the instance taken away?
    reconnect: Callable[[], Machine]  # a new connection to the same instance
    tokens_per_s: float | None = None  # the plan's estimate, for the data probe

    def prepare(self, machine: Machine, watcher: NoticeWatcher | None) -> Machine:
        """Bootstrap and stage (the machine: a new connection after a drop)."""
        for attempt in range(1, PREPARE_ATTEMPTS + 1):
            try:
                self._prepare(machine, watcher)
                return machine
            except ConnectionLost as exc:
                if attempt == PREPARE_ATTEMPTS or self.lost():
                    raise
                self.deps.sink.info(f"{exc}; reconnecting (attempt {attempt + 1})")
                machine.close()
                machine = self.reconnect()
        return machine

    def _prepare(self, machine: Machine, watcher: NoticeWatcher | None) -> None:
        """Bootstrap, then stage data. Where bootstrap only makes a directory (the NVMe is
        not built from raw disks) both run at once: staging then costs no extra wait."""
        got = self.got
        caps = got.provider.capabilities
        args = (machine, got.instance, caps, got.deadline, watcher)
        if caps.disposable:
            self.deps.sink.info(bootstrap(*args), detail=True)
            self.state(states.STAGING)
            self._stage(machine)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="cloudgpu-bootstrap") as pool:
            booting = pool.submit(bootstrap, *args)
            self.state(states.STAGING)
            try:
                self._stage(machine)
            except BaseException:
                booting.result()  # a bootstrap failure explains a staging one: raise it first
                raise
            self.deps.sink.info(booting.result(), detail=True)

    def _stage(self, machine: Machine) -> None:
        deps = self.deps
        stage_data(machine, self.job, deps.sink, deps.paths.cache_dir, deps.env)
        o = self.got.offer
        found = probe_line(machine, self.job, o.gpu_count, deps.sink, self.tokens_per_s)
        if found is not None:
            probes.record(
                deps.store, self.job_id, o.provider, o.instance_type, o.gpu or "",
                deps.clock(), found,
            )  # fmt: skip

    def syncer(self, machine: Machine) -> Syncer:
        return Syncer(machine, self.job, self.ckpt_local, self.deps.sink, self.deps.env)

    def run(
        self,
        machine: Machine,
        name: str,
        command: str,
        env: dict[str, str],
        out: Callable[[bytes], None],
    ) -> tuple[int, Machine]:
        """(the command's exit code, the machine: a new connection if the first one
        dropped while the command ran on)."""
        err = lambda b: self.deps.sink.job_output(b, stderr=True)  # noqa: E731
        if not getattr(machine, "detachable", False):
            with self.syncer(machine):
                rc = machine.run(command, env=env, stop=self.stop, on_stdout=out, on_stderr=err)
            return rc, machine
        run_dir = on_instance(machine, f"/nvme/.cloudgpu/runs/{self.job_id}-{name}")
        detached.start(machine, run_dir, command, env)
        follower = detached.Follower(run_dir, out, err)
        for attempt in range(1, REATTACH_ATTEMPTS + 1):
            try:
                with self.syncer(machine):
                    return follower.follow(machine, self.stop), machine
            except ConnectionLost as exc:
                if attempt == REATTACH_ATTEMPTS or self.lost():
                    raise
                self.deps.sink.info(f"{exc}; the job runs on: reconnecting to follow it")
                self.deps.sleep(min(2.0 * attempt, 10.0))
                machine.close()
                try:
                    machine = self.reconnect()
                except RemoteError as again:
                    raise ConnectionLost(f"{again}") from again
        raise AssertionError("unreachable")  # the loop returns or raises
