"""One job from provision to teardown: the lifecycle's main loop.

    provision -> SSH ready -> bootstrap (NVMe, deadline) -> stage data -> setup -> run
      -> collect outputs -> teardown (always; verified; spend recorded)

A spot preemption notice during the run flushes the checkpoint dir back, tears the lost
instance down, excludes its offer, provisions the next one and resumes from the
checkpoint. Teardown happens in ``finally``: on success, failure, exception, Ctrl-C or
SIGTERM, unless the caller asked to keep the instance. This module decides nothing by
provider name: only Capabilities.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import JobError, LimitExceeded, ProviderError
from cloudgpu.lifecycle import billing, metrics, notice, states, watch
from cloudgpu.lifecycle.batch import batch_job, run_batch
from cloudgpu.lifecycle.bootstrap import INSTANCE_ENV, bootstrap
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import Provisioned, Retry, provision
from cloudgpu.lifecycle.stage import (
    checkpoint_dir,
    collect_outputs,
    flush_checkpoint,
    on_instance,
    probe_line,
    restore_checkpoint,
    stage_data,
)
from cloudgpu.lifecycle.teardown import job_cost, teardown_instance, teardown_job
from cloudgpu.provider import Capabilities, NoticeWatcher
from cloudgpu.remote import Machine
from cloudgpu.spec.model import JobSpec
from cloudgpu.sshkeys import ensure_keypair
from cloudgpu.state import probes

DEADLINE_GRACE_S = 300.0  # past max_runtime, for collecting outputs and teardown
DEFAULT_EXPIRY_S = 24 * 3600.0  # tag expiry when the job sets no max_runtime
MAX_PREEMPTIONS = 5


@dataclass
class LaunchOptions:
    keep: bool = False
    grace_s: float = DEADLINE_GRACE_S
    # Called as teardown starts, e.g. so a second Ctrl-C cannot interrupt it.
    on_teardown: Callable[[], None] | None = None
    retry: Retry | None = None  # walk the offers again while none has capacity


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
        lim = job.limits.max_runtime_s
        self.deadline = self.started_at + lim + self.opts.grace_s if lim else None
        self.expires = self.deadline or self.started_at + DEFAULT_EXPIRY_S
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
        return self.spent + billing.cost(
            price, billing.billed_seconds(launched, self.deps.clock(), caps)
        )

    def state(self, state: str, **fields: object) -> None:
        self.deps.store.update_job(self.job_id, state=state, **fields)
        self.deps.store.add_event(self.job_id, "state", state)

    def execute(self) -> int:
        keep = False
        try:
            self.state(states.PROVISIONING, pid=os.getpid())
            rc = self._attempts()
            keep = self.opts.keep
            return self._finish(rc)
        except BaseException as exc:
            final = states.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else states.FAILED
            if isinstance(exc, LimitExceeded):
                final = states.STOPPED
            self.deps.store.update_job(self.job_id, state=final, error=str(exc)[:500])
            keep = self.opts.keep and isinstance(exc, JobError)
            raise
        finally:
            if self.opts.on_teardown is not None:
                self.opts.on_teardown()
            self.watcher.close()
            self._end(keep)

    def _attempts(self) -> int:
        excluded: set[str] = set()
        resumed = False
        for _ in range(MAX_PREEMPTIONS + 1):
            got = provision(
                self.deps,
                self.job_id,
                self.job,
                self.offers,
                public_key=self.public_key,
                deadline=self.deadline,
                expires=self.expires,
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
            rc = self._on_instance(got, resumed)
            if self.watcher.reason != watch.PREEMPTED:
                return rc
            self._preempted(got, excluded)
            resumed = True
        raise LimitExceeded(f"preempted {MAX_PREEMPTIONS + 1} times; giving up")

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
            expires=self.expires,
            excluded=set(),
            batch=replace(batch_job(self.job, self.job_id), resume_from=previous.instance.id),
        )
        self.watcher.watch(got)
        return got

    def _connect(self, got: Provisioned) -> Machine:
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
            timeout=self.deps.ssh_timeout,
            on_new_host_key=pinned,
        )

    def _on_instance(self, got: Provisioned, resumed: bool) -> int:
        if got.provider.capabilities.batch:  # no shell: the provider runs the whole job
            return run_batch(
                self.deps, got, self.job, self.watcher.stop, self.state, self._next_session
            )
        self.state(states.BOOTSTRAPPING)
        machine = self._connect(got)
        reader: notice.NoticeReader | None = None
        try:
            watcher = got.provider.notice_watcher(got.instance)
            self._prepare(machine, got, watcher)
            if watcher is not None:
                reader = self._read_notices(machine)
            if resumed:
                restore_checkpoint(machine, self.job, self.ckpt_local, self.deps.sink)
            rc = self._commands(machine, got)
            if self.watcher.reason == watch.PREEMPTED:
                flush_checkpoint(machine, self.job, self.ckpt_local, self.deps.sink)
                if watcher is not None:
                    notice.acknowledge(machine)  # flushed: the cloud may go ahead now
                return rc
            if self.job.outputs:
                self.state(states.COLLECTING)
                collect_outputs(machine, self.job, self.deps.sink)
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

    def _prepare(self, machine: Machine, got: Provisioned, watcher: NoticeWatcher | None) -> None:
        """Bootstrap, then stage data. Where bootstrap only makes a directory (the NVMe is
        not built from raw disks) both run at once: staging then costs no extra wait."""
        caps = got.provider.capabilities
        args = (machine, got.instance, caps, self.deadline, watcher)
        if caps.disposable:
            self.deps.sink.info(bootstrap(*args), detail=True)
            self.state(states.STAGING)
            self._stage(machine, got)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="cloudgpu-bootstrap") as pool:
            booting = pool.submit(bootstrap, *args)
            self.state(states.STAGING)
            try:
                self._stage(machine, got)
            except BaseException:
                booting.result()  # a bootstrap failure explains a staging one: raise it first
                raise
            self.deps.sink.info(booting.result(), detail=True)

    def _stage(self, machine: Machine, got: Provisioned) -> None:
        stage_data(machine, self.job, self.deps.sink, self.deps.paths.cache_dir, self.deps.env)
        o = got.offer
        found = probe_line(machine, self.job, o.gpu_count, self.deps.sink)
        if found is not None:
            probes.record(
                self.deps.store, self.job_id, o.provider, o.instance_type, o.gpu or "",
                self.deps.clock(), found,
            )  # fmt: skip

    def _commands(self, machine: Machine, got: Provisioned) -> int:
        env = {
            **self.job.env,
            "CLOUDGPU_JOB": self.job_id,
            INSTANCE_ENV: got.instance.id,
            "CLOUDGPU_NVME": machine.nvme_path,
            metrics.METRICS_ENV: metrics.metrics_path(machine),
        }
        tap = metrics.MetricsTap(self.deps.sink.job_output)  # the job's reported speed
        if self.job.checkpoint:
            env["CLOUDGPU_CHECKPOINT"] = on_instance(machine, self.job.checkpoint)
        for step, command in ((states.SETUP, self.job.setup), (states.RUNNING, self.job.run)):
            if not command.strip() or self.watcher.reason:
                continue
            self.state(step)
            self.deps.sink.info(f"{'setup' if step == states.SETUP else 'run'}: starting")
            rc = machine.run(
                command,
                env=env,
                stop=self.watcher.stop,
                on_stdout=tap if step == states.RUNNING else self.deps.sink.job_output,
                on_stderr=lambda b: self.deps.sink.job_output(b, stderr=True),
            )
            if rc != 0 and step == states.SETUP and not self.watcher.reason:
                raise JobError(
                    f"job {self.job_id}: setup failed with exit code {rc}; log: {self._log_path()}",
                    exit_code=rc,
                )
            if step == states.RUNNING:
                if rc == 0 and not self.watcher.reason:
                    self._record_speed(machine, got, tap, env[metrics.METRICS_ENV])
                return rc
        return 0

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
        reason = self.watcher.reason
        if reason in (watch.MAX_RUNTIME, watch.MAX_COST):
            self.deps.store.update_job(self.job_id, exit_code=rc)
            raise LimitExceeded(
                f"job {self.job_id} stopped: {self.watcher.detail}; instance torn down, "
                f"log: {self._log_path()}"
            )
        self.deps.store.update_job(
            self.job_id, exit_code=rc, state=states.SUCCEEDED if rc == 0 else states.FAILED
        )
        if rc != 0:
            raise JobError(
                f"job {self.job_id}: run failed with exit code {rc}; log: {self._log_path()}",
                exit_code=rc,
            )
        return 0

    def _end(self, keep: bool) -> None:
        if keep and self.deps.store.instances(self.job_id, live_only=True):
            self.deps.store.update_job(self.job_id, state=states.KEPT)
            self.deps.sink.info(
                f"instance kept (--keep): `cloudgpu ssh {self.job_id}`, "
                f"`cloudgpu down {self.job_id}` when done"
            )
            return
        self.deps.store.add_event(self.job_id, "state", states.TEARING_DOWN)
        failures = teardown_job(self.deps, self.job_id)
        cost = job_cost(self.deps, self.job_id)
        self.deps.sink.info(f"total cost ${cost:.4f}")
        if failures:
            self.deps.store.update_job(self.job_id, error="teardown failed: " + failures[0])

    def _log_path(self) -> Path | str:
        return self.deps.store.job(self.job_id).log_path
