"""One job from provision to teardown: the lifecycle's main loop.

    provision -> SSH ready -> bootstrap (NVMe, deadline) -> stage data -> setup -> run
      -> collect outputs -> teardown (always; verified; spend recorded)

A spot preemption notice during the run flushes the checkpoint dir back, tears the lost
instance down, excludes its offer, provisions the next one and resumes from the
checkpoint; after ``max_preemptions`` a ``spot: auto`` job continues on demand. A first
Ctrl-C/SIGTERM/SIGHUP (:meth:`JobRun.interrupt`) stops the job, flushes the checkpoint
and collects outputs before teardown. Teardown happens in ``finally``: on success,
failure, exception or signal, unless the caller asked to keep the instance, or outputs
could not be collected (then the instance is kept for ``collect_grace``). Every instance
gets a deadline it enforces itself: max_runtime, or what max_cost buys at its price, or
the configured default. This module decides nothing by provider name: only Capabilities.
The work on the instance is cloudgpu.lifecycle.session's (bootstrap, staging, each
command followed over reconnects), how the job ends is cloudgpu.lifecycle.ending's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from cloudgpu.catalog.offer import Offer
from cloudgpu.costs import billing
from cloudgpu.errors import JobError, LimitExceeded, ProviderError, RemoteError
from cloudgpu.lifecycle import ending, faults, metrics, notice, states, watch
from cloudgpu.lifecycle.batch import batch_job, run_batch
from cloudgpu.lifecycle.bootstrap import INSTANCE_ENV
from cloudgpu.lifecycle.collect import OutputsNotCollected, collect
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.options import DEFAULT_DEADLINE_S, MAX_PREEMPTIONS, LaunchOptions
from cloudgpu.lifecycle.provision import Provisioned, provision
from cloudgpu.lifecycle.session import Session
from cloudgpu.lifecycle.stage import (
    checkpoint_dir,
    flush_checkpoint,
    on_instance,
    restore_checkpoint,
)
from cloudgpu.lifecycle.teardown import teardown_instance
from cloudgpu.provider import Capabilities
from cloudgpu.remote import Machine
from cloudgpu.spec.model import JobSpec
from cloudgpu.sshkeys import ensure_keypair

RECONNECT_TIMEOUT_S = 60.0  # for a running instance to answer SSH again

__all__ = ["DEFAULT_DEADLINE_S", "MAX_PREEMPTIONS", "JobRun", "LaunchOptions"]


class JobRun:
    """Drives one job; ``execute`` returns the job's exit code or raises."""

    def __init__(
        self,
        deps: Deps,
        job_id: str,
        job: JobSpec,
        offers: Sequence[Offer],
        options: LaunchOptions | None = None,
    ) -> None:
        self.deps = deps
        self.job_id = job_id
        self.job = job
        self.offers = list(offers)
        self.opts = options or LaunchOptions()
        self.started_at = deps.clock()
        self.phase: str = states.PENDING
        self.held_until: float | None = None  # kept for `down --collect` until then
        self.key_file, self.public_key = ensure_keypair(deps.paths.keys_dir)
        self.ckpt_local = checkpoint_dir(deps.paths.data_dir, job_id)
        # What finished instances cost, and the live one: kept in memory because the
        # watcher thread must not touch the store (one SQLite connection per thread).
        self.spent = 0.0
        self.live: tuple[float, float, Capabilities] | None = None  # launched, $/h, caps
        self.watcher = watch.Watcher(deps, job_id, job.limits, self.started_at, self.cost_now)

    def cost_now(self) -> float:
        live = self.live
        if live is None:
            return self.spent
        launched, price, caps = live
        return self.spent + billing.charge(price, launched, self.deps.clock(), caps)

    def state(self, state: str, **fields: object) -> None:
        self.phase = state
        self.deps.store.update_job(self.job_id, state=state, **fields)
        self.deps.store.add_event(self.job_id, "state", state)

    def deadline(self, offer: Offer) -> float:
        """When an instance of ``offer`` must stop itself, grace included."""
        now, spent = self.deps.clock(), self.cost_now()
        end = faults.deadline(
            self.job, offer, self.started_at, now, spent, self.opts.default_deadline_s
        )
        return end + self.opts.grace_s

    def interrupt(self) -> bool:
        """A first Ctrl-C, SIGTERM or SIGHUP. While the job runs or outputs come back:
        stop the job, flush the checkpoint, collect, then tear down (True). Before that
        there is nothing to save: the caller unwinds at once (False)."""
        if self.phase not in (states.SETUP, states.RUNNING, states.COLLECTING):
            return False
        what = "finishing collection" if self.phase == states.COLLECTING else "stopping the job"
        self.watcher.trip(
            watch.INTERRUPTED, f"interrupted: {what}, then tearing down (again to skip)"
        )
        return True

    def execute(self) -> int:
        keep = False
        try:
            self.state(states.PROVISIONING, pid=os.getpid(), host=socket.gethostname())
            rc = self._attempts()
            keep = self.opts.keep
            return self._finish(rc)
        except BaseException as exc:
            final = states.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else states.FAILED
            if isinstance(exc, LimitExceeded):
                final = states.STOPPED
            self.deps.store.update_job(self.job_id, state=final, error=str(exc)[:500])
            keep = (self.opts.keep and isinstance(exc, JobError)) or self.held_until is not None
            raise
        finally:
            if self.opts.on_teardown is not None:
                self.opts.on_teardown()
            self.watcher.close()
            self._end(keep)

    def _attempts(self) -> int:
        excluded: set[str] = set()
        preemptions = 0
        while True:
            got = provision(
                self.deps,
                self.job_id,
                self.job,
                self.offers,
                public_key=self.public_key,
                deadline=self.deadline,
                excluded=excluded,
                retry=self.opts.retry,
                batch=batch_job(self.job, self.job_id),
            )
            self.deps.store.update_job(
                self.job_id, provider=got.offer.provider, instance_type=got.offer.instance_type
            )
            rec = self.deps.store.instance(got.record_id)
            self.live = (
                rec.launched_at or self.deps.clock(),
                rec.price_per_hour,
                got.provider.capabilities,
            )
            self.watcher.watch(got)
            rc = self._on_instance(got, resumed=preemptions > 0)
            if rc is not None:
                return rc
            self._preempted(got, excluded)
            preemptions += 1
            if preemptions >= self.max_preemptions:
                self._on_demand_now(preemptions, excluded)

    @property
    def max_preemptions(self) -> int:
        """The job's limits.max_preemptions, else the configured one."""
        own = self.job.limits.max_preemptions
        return self.opts.max_preemptions if own is None else own

    def _on_demand_now(self, preemptions: int, excluded: set[str]) -> None:
        """The preemption limit is reached: a ``spot: auto`` job goes on on demand."""
        limit = f"preempted {preemptions} times (max_preemptions {self.max_preemptions})"
        spot = {o.key for o in self.offers if o.market == "spot"}
        left = [o for o in self.offers if o.key not in excluded | spot]
        if self.job.resources.spot != "auto" or not left or spot <= excluded:
            raise LimitExceeded(f"job {self.job_id}: {limit}; giving up")
        excluded |= spot
        self.deps.sink.info(f"{limit}: continuing on on-demand offers (resources.spot: auto)")

    def _preempted(self, got: Provisioned, excluded: set[str]) -> None:
        rec = self.deps.store.instance(got.record_id)
        self.deps.store.add_event(self.job_id, "preempted", self.watcher.detail, rec.id)
        self.live = None
        cost = teardown_instance(self.deps, rec, final_state=states.I_PREEMPTED)
        self.spent += cost
        self.deps.sink.info(f"preempted instance {rec.provider_id} gone, billed ${cost:.4f}")
        excluded.add(got.offer.key)
        self.deps.sink.info(f"re-provisioning without {got.offer.key}")
        self.watcher.reset()

    def _next_session(self, previous: Provisioned) -> Provisioned:
        """A batch job's next session: the same offer, starting from ``previous``'s
        saved checkpoint (its record stays until teardown: the new one reads from it)."""
        got = provision(
            self.deps,
            self.job_id,
            self.job,
            [previous.offer],
            public_key=self.public_key,
            deadline=self.deadline,
            excluded=set(),
            batch=replace(batch_job(self.job, self.job_id), resume_from=previous.instance.id),
        )
        self.watcher.watch(got)
        return got

    def _connect(self, got: Provisioned, timeout: float | None = None) -> Machine:
        """A connection to ``got``; ``timeout``: for SSH to answer (default: as long as a
        new instance may take to boot)."""

        def pinned(label: str, fp: str) -> None:
            self.deps.sink.info(f"host key of {label} pinned on first use: {fp}")

        own = got.provider.open_machine(got.instance)
        if own is not None:
            if not isinstance(own, Machine):
                raise ProviderError(f"{got.provider.name}: open_machine gave no Machine")
            return own
        key = None if got.instance.ssh and got.instance.ssh.key_file else self.key_file
        return self.deps.connect(
            got.instance,
            known_hosts=self.deps.known_hosts,
            key_file=key,
            timeout=timeout or self.deps.ssh_timeout,
            on_new_host_key=pinned,
        )

    def _on_instance(self, got: Provisioned, resumed: bool) -> int | None:
        """The job's exit code; None when the instance was lost (preempted, with or
        without notice, or vanished) before the job finished: the caller re-provisions."""
        if got.provider.capabilities.batch:  # no shell: the provider runs the whole job
            return run_batch(
                self.deps, got, self.job, self.watcher.stop, self.state, self._next_session
            )
        self.state(states.BOOTSTRAPPING)
        try:
            machine = self._connect(got)
        except RemoteError:
            if self._lost(got):
                return None
            raise
        reader: notice.NoticeReader | None = None
        try:
            watcher = got.provider.notice_watcher(got.instance)
            try:
                machine = self._session(got).prepare(machine, watcher)
                if watcher is not None:
                    reader = self._read_notices(machine)
                if resumed:
                    restore_checkpoint(
                        machine, self.job, self.ckpt_local, self.deps.sink, self.deps.env
                    )
                rc, machine = self._commands(machine, got)
            except RemoteError:
                if self._lost(got):
                    return None
                raise
            if rc == faults.EXIT_LOST and not self.watcher.reason:
                self._lost(got)  # the session died with the instance, or the job exited 255
            if self.watcher.reason and self.job.checkpoint:
                flush_checkpoint(machine, self.job, self.ckpt_local, self.deps.sink, self.deps.env)
            if self.watcher.reason == watch.PREEMPTED:
                if watcher is not None:
                    notice.acknowledge(machine)  # flushed: the cloud may go ahead now
                return None
            if self.job.outputs:
                self.state(states.COLLECTING)
                machine = self._collect(machine, got, rc)
            return rc
        finally:
            if reader is not None:
                reader.close()
            machine.close()

    def _read_notices(self, machine: Machine) -> notice.NoticeReader:
        w = self.watcher
        return notice.NoticeReader(
            machine, w.notice, w.advisory, self.deps.clock, self.deps.sink.info
        ).start()

    def _lost(self, got: Provisioned) -> bool:
        """After a dropped session: was the instance taken away (then the preemption
        path, whatever the notice said), or is it healthy?"""
        if self.watcher.reason == watch.PREEMPTED:
            return True
        state = faults.instance_lost(got, self.deps.sleep)
        if state is not None:
            self.watcher.trip(watch.PREEMPTED, f"instance {got.instance.id} is {state.value}")
        return self.watcher.reason == watch.PREEMPTED

    def _collect(
        self, machine: Machine, got: Provisioned, rc: int, job: JobSpec | None = None
    ) -> Machine:
        """The outputs of ``job`` (default: this run's job) from ``got``."""
        spec = job or self.job
        try:
            machine, _ = collect(
                machine,
                spec,
                self.deps.sink,
                lambda: self._connect(got, RECONNECT_TIMEOUT_S),
                self.deps.sleep,
                env=self.deps.env,
                still_there=lambda: faults.instance_lost(got, self.deps.sleep) is None,
            )
            return machine
        except OutputsNotCollected as exc:
            until = min(self.deps.clock() + self.opts.collect_grace_s, got.deadline)
            err = faults.uncollected(self.job_id, spec, got, rc, exc, until)
            if isinstance(err, OutputsNotCollected):
                self.held_until = until
            raise err from exc

    def _commands(self, machine: Machine, got: Provisioned) -> tuple[int, Machine]:
        """Setup, then run; (the run's exit code, the machine: a new connection if the
        first one dropped while the job ran on)."""
        env = {**self.job_env(machine, got), metrics.METRICS_ENV: metrics.metrics_path(machine)}
        tap = metrics.MetricsTap(self.deps.sink.job_output)  # the job's reported speed
        for step, command in ((states.SETUP, self.job.setup), (states.RUNNING, self.job.run)):
            if not command.strip() or self.watcher.reason:
                continue
            self.state(step)
            self.deps.sink.info(f"{'setup' if step == states.SETUP else 'run'}: starting")
            out = tap if step == states.RUNNING else self.deps.sink.job_output
            rc, machine = self._session(got).run(
                machine, f"{step}-{got.record_id}", command, env, out
            )
            if rc != 0 and step == states.SETUP and not self.watcher.reason:
                raise JobError(
                    f"job {self.job_id}: setup failed with exit code {rc}; log: {self._log_path()}",
                    exit_code=rc,
                )
            if step == states.RUNNING:
                if rc == 0 and not self.watcher.reason:
                    self._record_speed(machine, got, tap, env[metrics.METRICS_ENV])
                return rc, machine
        return 0, machine

    def _session(self, got: Provisioned) -> Session:
        return Session(
            self.deps, self.job_id, self.job, got, self.ckpt_local, self.watcher.stop,
            state=self.state, lost=lambda: self._lost(got),
            reconnect=lambda: self._connect(got, RECONNECT_TIMEOUT_S),
            tokens_per_s=self.opts.tokens_per_s.get(got.offer.key),
        )  # fmt: skip

    def job_env(self, machine: Machine, got: Provisioned) -> dict[str, str]:
        """What every command of the job gets on ``got``'s machine."""
        env = {
            **self.job.env,
            "CLOUDGPU_JOB": self.job_id,
            INSTANCE_ENV: got.instance.id,
            "CLOUDGPU_NVME": machine.nvme_path,
        }
        if self.job.checkpoint:
            env["CLOUDGPU_CHECKPOINT"] = on_instance(machine, self.job.checkpoint)
        return env

    def _record_speed(
        self, machine: Machine, got: Provisioned, tap: metrics.MetricsTap, path: str
    ) -> None:
        rec = metrics.record_run(
            self.deps.store, self.job_id, self.job, got.offer, tap, machine, path, self.deps.clock()
        )
        if rec is not None:
            self.deps.sink.info(
                f"recorded {rec.tokens_per_s:,.0f} tokens/s ({rec.source}) for plan"
            )

    def _finish(self, rc: int) -> int:
        return ending.finish(self.deps, self.job_id, self.watcher, rc)

    def _end(self, keep: bool) -> None:
        if ending.kept(self.deps, self.job_id, keep, held=self.held_until is not None):
            return
        self.phase = states.TEARING_DOWN
        ending.tear_down(self.deps, self.job_id)

    def _log_path(self) -> Path | str:
        return ending.log_path(self.deps, self.job_id)
