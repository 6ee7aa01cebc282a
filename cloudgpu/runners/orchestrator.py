"""Single-use GitHub Actions runners on cloudgpu instances: start, stop and gc.

A runner is a special job: the same ranking, provisioning (failover, tags, idempotency,
state recorded before create), bootstrap (NVMe, deadline) and teardown as `launch`
(cloudgpu.lifecycle), with templates/github/runner-bootstrap.sh started on the
instance instead of a job command. Order of `start`, chosen so that nothing is left
behind on any error:

    validate input -> rank offers (nothing created yet) -> check the repository
    -> just-in-time runner registration -> provision -> bootstrap -> upload the JIT
    config (0600) and start the runner detached -> wait until GitHub reports it online

Any failure after the registration removes the runner and tears the instance down
before the error surfaces. `stop` and `gc` find instances by tag (cloudgpu.runners.naming),
never only through the state store or the start job's outputs, which may not exist.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CloudGPUError, ConfigError, ProviderError, StateError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.bootstrap import bootstrap, may_dispose
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import Provisioned, provision
from cloudgpu.lifecycle.teardown import teardown_instance, teardown_job
from cloudgpu.provider import TAG_EXPIRES, TAG_JOB, TAG_OWNER, Instance, Provider
from cloudgpu.remote import Machine
from cloudgpu.runners.github import (
    GitHubClient,
    JitConfig,
    RunnerBusy,
    validate_labels,
    validate_repo,
)
from cloudgpu.runners.naming import PREFIX, repo_owner_tag, runner_job_id, sanitize_run_tag
from cloudgpu.spec.model import JobSpec, Limits, Resources
from cloudgpu.spec.units import parse_gpu
from cloudgpu.sshkeys import ensure_keypair

RUNNER_DIRNAME = "actions-runner"


@dataclass(frozen=True)
class RunnerRequest:
    repo: str
    run_tag: str
    gpu: str = "any"
    spot: bool = False
    max_price: float | None = None
    ttl_s: float = 3 * 3600.0
    idle_timeout_s: float = 600.0
    labels: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    allow_public: bool = False


@dataclass(frozen=True)
class RunnerSource:
    """Where the instance downloads the runner from (None: the script's pinned release)."""

    url: str | None = None
    sha256: str | None = None
    version: str | None = None


def runner_job(req: RunnerRequest, job_id: str) -> JobSpec:
    """The job a runner request stands for: its resources and its lifetime as limits."""
    try:
        gpu = parse_gpu(req.gpu)
    except ValueError as exc:
        raise ConfigError(f"--gpu: {exc}") from exc
    if req.max_price is not None and not req.max_price > 0:
        raise ConfigError("--max-price: expected a positive USD amount per hour")
    resources_ = Resources(
        gpu=gpu,
        spot="true" if req.spot else "false",
        max_price=req.max_price,
        providers=req.providers,
    )
    limits = Limits(max_runtime_s=req.ttl_s, idle_timeout_s=req.idle_timeout_s)
    return JobSpec(name=job_id, resources=resources_, limits=limits, source="runner")


def plan_runner(
    req: RunnerRequest,
    offers_for: Callable[[JobSpec], list[Offer]],
    boot_estimate_s: Callable[[str], float],
) -> tuple[str, JobSpec, list[Offer]]:
    """Validate a request and choose its offers, best first: everything `start` decides
    before it talks to GitHub or a provider (also what `runner start --dry-run` shows)."""
    validate_repo(req.repo)
    validate_labels(list(req.labels))
    try:
        sanitize_run_tag(req.run_tag)
    except ValueError as exc:
        raise ConfigError(f"--run-tag: {exc}") from exc
    job_id = runner_job_id(req.repo, req.run_tag)
    job = runner_job(req, job_id)
    offers = offers_for(job)  # raises when no enabled provider offers the GPU
    boot = boot_estimate_s(offers[0].provider)
    if req.ttl_s <= boot:
        raise ConfigError(
            f"--ttl: {req.ttl_s:.0f} s is not longer than the expected boot time on "
            f"{offers[0].provider} ({boot:.0f} s)",
            hint="give the runner time to boot and run a job, e.g. --ttl 1h",
        )
    return job_id, job, offers


@dataclass(frozen=True)
class Started:
    job_id: str
    label: str
    runner_id: int
    instance_id: str
    provider: str
    offer: str


@dataclass
class Swept:
    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@dataclass
class Runners:
    """Runner operations over injected parts (no globals, no provider names)."""

    deps: Deps
    github: GitHubClient
    offers_for: Callable[[JobSpec], list[Offer]]  # fitting offers, best first
    providers: Callable[[], Sequence[Provider]]  # enabled providers, for sweeps
    boot_estimate_s: Callable[[str], float]  # expected boot seconds per provider
    source: RunnerSource = RunnerSource()
    online_timeout_s: float = 600.0
    boot_grace_s: float = 900.0
    busy_wait_s: float = 300.0
    poll_s: float = 1.0

    # -- start -----------------------------------------------------------------------

    def start(self, req: RunnerRequest) -> Started:
        job_id, job, offers = plan_runner(req, self.offers_for, self.boot_estimate_s)
        self._check_repository(req)
        self._record_job(job_id, req)
        jit = self.github.generate_jitconfig(req.repo, job_id, [job_id, *req.labels])
        try:
            return self._provision_and_run(req, job_id, job, offers, jit)
        except BaseException as exc:
            self._undo_start(req.repo, job_id, jit.runner.id, exc)
            raise

    def _check_repository(self, req: RunnerRequest) -> None:
        repo = self.github.repository(req.repo)
        if not repo.get("private", True) and not req.allow_public:
            raise ConfigError(
                f"{req.repo} is public: a self-hosted runner there can run code from forks' "
                "pull requests",
                hint="pass --allow-public only if no untrusted workflow can reach this runner",
            )

    def _record_job(self, job_id: str, req: RunnerRequest) -> None:
        spec = {
            "kind": "github-runner",
            "repo": req.repo,
            "run_tag": req.run_tag,
            "gpu": req.gpu,
            "labels": list(req.labels),
            "ttl_s": req.ttl_s,
        }
        try:
            self.deps.store.job(job_id)
            raise ConfigError(
                f"--run-tag: a runner for run tag '{req.run_tag}' of {req.repo} exists already",
                hint="use a unique run tag per workflow run (default: run id and attempt)",
            )
        except StateError:
            pass
        self.deps.store.add_job(job_id, f"runner {req.repo}", spec, state=states.PROVISIONING)

    def _provision_and_run(
        self, req: RunnerRequest, job_id: str, job: JobSpec, offers: list[Offer], jit: JitConfig
    ) -> Started:
        key_file, public_key = ensure_keypair(self.deps.paths.keys_dir)
        now = self.deps.clock()
        deadline = now + req.ttl_s
        got = provision(
            self.deps,
            job_id,
            job,
            offers,
            public_key=public_key,
            deadline=lambda _offer: deadline,
            excluded=set(),
        )
        self.deps.store.update_job(
            job_id,
            state=states.BOOTSTRAPPING,
            provider=got.offer.provider,
            instance_type=got.offer.instance_type,
        )
        machine = self._connect(got, key_file)
        try:
            caps = got.provider.capabilities
            self.deps.sink.info(bootstrap(machine, got.instance, caps, deadline), detail=True)
            self._start_runner(machine, req, jit, disposable=may_dispose(got.instance, caps))
        finally:
            machine.close()
        self._wait_online(req.repo, jit, got)
        self.deps.store.update_job(job_id, state=states.RUNNING)
        self.deps.store.add_event(job_id, "runner_online", f"runner {jit.runner.id}", got.record_id)
        return Started(
            job_id, job_id, jit.runner.id, got.instance.id, got.offer.provider, got.offer.key
        )

    def _connect(self, got: Provisioned, key_file: Path) -> Machine:
        def pinned(label: str, fp: str) -> None:
            self.deps.sink.info(f"host key of {label} pinned on first use: {fp}")

        own_key = got.instance.ssh is not None and got.instance.ssh.key_file
        return self.deps.connect(
            got.instance,
            known_hosts=self.deps.known_hosts,
            key_file=None if own_key else key_file,
            timeout=self.deps.ssh_timeout,
            on_new_host_key=pinned,
        )

    def _start_runner(
        self, machine: Machine, req: RunnerRequest, jit: JitConfig, *, disposable: bool
    ) -> None:
        rdir = f"{machine.nvme_path.rstrip('/')}/{RUNNER_DIRNAME}"
        script = resources.files("cloudgpu.templates").joinpath("github/runner-bootstrap.sh")
        with tempfile.TemporaryDirectory(dir=self.deps.paths.data_dir) as tmp:
            os.chmod(tmp, 0o700)
            local_script = Path(tmp) / "runner-bootstrap.sh"
            local_script.write_text(script.read_text())
            machine.put_file(local_script, f"{rdir}/runner-bootstrap.sh")
            secret = Path(tmp) / ".jit"
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(jit.encoded_jit_config)
            machine.put_file(secret, f"{rdir}/.jit")
        env = {
            "RUNNER_DIR": rdir,
            "IDLE_TIMEOUT_S": str(int(req.idle_timeout_s)),
            "TTL_S": str(int(req.ttl_s)),
            "CLOUDGPU_DISPOSABLE": "1" if disposable else "0",
        }
        for key, value in (
            ("RUNNER_URL", self.source.url),
            ("RUNNER_SHA256", self.source.sha256),
            ("RUNNER_VERSION", self.source.version),
        ):
            if value:
                env[key] = value
        q = shlex.quote
        rc = machine.run(
            f"chmod 600 {q(rdir)}/.jit && cd {q(rdir)} && "
            f"setsid nohup bash runner-bootstrap.sh </dev/null >bootstrap.out 2>&1 &",
            env=env,
            timeout=60,
        )
        if rc != 0:
            raise ProviderError(f"could not start the runner bootstrap (exit status {rc})")

    def _wait_online(self, repo: str, jit: JitConfig, got: Provisioned) -> None:
        waited = 0.0
        while waited < self.online_timeout_s:
            runner = self.github.runner(repo, jit.runner.id)
            # Gone means GitHub removed the single-use runner after its job: it was
            # online, took a job and finished between two polls.
            if runner is None or runner.status == "online" or runner.busy:
                return
            if got.provider.describe(got.instance.id).state.is_gone:
                raise ProviderError(
                    f"runner {jit.runner.name} never came online: instance {got.instance.id} "
                    "powered off first (did the runner fail to start?)",
                    provider=got.provider.name,
                )
            self.deps.sleep(self.poll_s)
            waited += self.poll_s
        raise ProviderError(
            f"runner {jit.runner.name} never came online within {self.online_timeout_s:.0f} s",
            hint="see bootstrap.log in the runner directory on the instance (`cloudgpu runner "
            "start` removed the instance and the registration)",
        )

    def _undo_start(self, repo: str, job_id: str, runner_id: int, exc: BaseException) -> None:
        self.deps.sink.info(f"runner start failed ({type(exc).__name__}); cleaning up")
        try:
            self.github.delete_runner(repo, runner_id)
        except CloudGPUError as err:
            self.deps.sink.info(f"could not remove runner {runner_id}: {err}")
        failures = teardown_job(self.deps, job_id)
        self.deps.store.update_job(job_id, state=states.FAILED, error=str(exc)[:500])
        if failures:
            self.deps.sink.info("left behind (run `cloudgpu runner gc`): " + "; ".join(failures))

    # -- stop ------------------------------------------------------------------------

    def stop(self, repo: str, run_tag: str) -> Swept:
        validate_repo(repo)
        return self.stop_job(repo, runner_job_id(repo, run_tag), run_tag)

    def made_here(self, runner_name: str) -> bool:
        """Was ``runner_name`` started from this store (our name prefix and our record)?"""
        if not runner_name.startswith(PREFIX):
            return False
        try:
            self.deps.store.job(runner_name)
        except StateError:
            return False
        return True

    def stop_job(self, repo: str, job_id: str, run_tag: str = "") -> Swept:
        """Remove the runner named ``job_id`` and terminate its tagged instances."""
        out = Swept()
        for runner in self.github.runners(repo, name=job_id):
            out.lines.append(self._remove_runner(repo, runner.id, runner.name))
        out.lines += self._terminate_tagged(job_id, out)
        if not out.lines:
            out.lines.append(f"nothing found for run tag '{run_tag or job_id}' of {repo}")
        return out

    def _remove_runner(self, repo: str, runner_id: int, name: str) -> str:
        waited = 0.0
        while True:
            try:
                removed = self.github.delete_runner(repo, runner_id)
                return f"runner {name}: {'removed' if removed else 'already gone'}"
            except RunnerBusy:
                if waited >= self.busy_wait_s:
                    return f"runner {name}: still busy after {waited:.0f} s; instance removed"
                self.deps.sleep(self.poll_s * 5)
                waited += self.poll_s * 5

    def _terminate_tagged(self, job_id: str, out: Swept) -> list[str]:
        lines = []
        for provider in self.providers():
            try:
                found = provider.list_instances({TAG_JOB: job_id})
            except CloudGPUError as exc:
                out.failures.append(f"{provider.name}: cannot list instances: {exc}")
                continue
            for inst in found:
                lines.append(self._terminate(provider, inst, out))
        for rec in self.deps.store.instances(job_id, live_only=True):  # created, never tagged
            try:
                teardown_instance(self.deps, rec)
                lines.append(f"{rec.provider} {rec.provider_id or rec.id}: terminated")
            except CloudGPUError as exc:
                out.failures.append(f"{rec.provider} {rec.provider_id or rec.id}: {exc}")
        self._finish_job(job_id)
        return lines

    def _terminate(self, provider: Provider, inst: Instance, out: Swept) -> str:
        records = [
            r
            for r in self.deps.store.instances(inst.tags.get(TAG_JOB), live_only=True)
            if r.provider_id == inst.id and r.provider == provider.name
        ]
        try:
            if records:
                teardown_instance(self.deps, records[0])
            else:
                provider.terminate(inst.id)
                self._verify_gone(provider, inst.id)
        except CloudGPUError as exc:
            out.failures.append(f"{provider.name} {inst.id}: {exc}")
            return f"{provider.name} {inst.id}: terminate FAILED"
        return f"{provider.name} {inst.id}: terminated"

    def _verify_gone(self, provider: Provider, instance_id: str, timeout: float = 300.0) -> None:
        waited = 0.0
        while not provider.describe(instance_id).state.is_gone:
            if waited >= timeout:
                raise ProviderError(
                    f"instance {instance_id} still not terminated after {timeout:.0f} s",
                    provider=provider.name,
                )
            self.deps.sleep(0.25)
            waited += 0.25

    def _finish_job(self, job_id: str) -> None:
        try:
            job = self.deps.store.job(job_id)
        except StateError:
            return
        if job.state not in states.FINAL:
            self.deps.store.update_job(job_id, state=states.SUCCEEDED)

    # -- gc --------------------------------------------------------------------------

    def gc(self, repo: str) -> Swept:
        """Sweep runner instances past their TTL, or whose runner is gone or offline past
        the boot grace; then offline runners whose instance is gone. A busy runner inside
        its TTL is never touched."""
        validate_repo(repo)
        out = Swept()
        runners = {r.name: r for r in self.github.runners(repo) if r.name.startswith(PREFIX)}
        live_jobs: set[str] = set()
        now = self.deps.clock()
        for provider in self.providers():
            try:
                found = provider.list_instances({TAG_OWNER: repo_owner_tag(repo)})
            except CloudGPUError as exc:
                out.failures.append(f"{provider.name}: cannot list instances: {exc}")
                continue
            for inst in found:
                job_id = inst.tags.get(TAG_JOB, "")
                why = self._sweep_reason(inst, runners.get(job_id), now)
                if why is None:
                    live_jobs.add(job_id)
                    continue
                if job_id in runners:
                    out.lines.append(self._remove_runner(repo, runners[job_id].id, job_id))
                out.lines.append(f"{self._terminate(provider, inst, out)} ({why})")
                self._finish_job(job_id)
        for name, runner in runners.items():
            if name not in live_jobs and runner.status == "offline" and not runner.busy:
                out.lines.append(self._remove_runner(repo, runner.id, name) + " (no instance)")
        return out

    def _sweep_reason(self, inst: Instance, runner: object, now: float) -> str | None:
        expires = float(inst.tags.get(TAG_EXPIRES, "0") or 0)
        if expires and now >= expires:
            return "past its TTL"
        age = now - inst.launched_at if inst.launched_at else None
        if runner is None:
            return "runner gone" if age is None or age > self.boot_grace_s else None
        if getattr(runner, "busy", False):
            return None
        if getattr(runner, "status", "") == "offline" and (age is None or age > self.boot_grace_s):
            return "runner offline past the boot grace"
        return None
