"""Shared pieces of the sim fault tests: jobs run in-process through JobRun with real
parts (sim instances, real SSH) and a connector that can drop the connection under a
live transfer or command, as a reset NAT would; a cloud that preempts on cue."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cloudgpu import remote
from cloudgpu.config import load_config
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.launch import create_job
from cloudgpu.lifecycle.output import JobLog
from cloudgpu.lifecycle.run import JobRun, LaunchOptions
from cloudgpu.paths import default_paths
from cloudgpu.provider import Instance
from cloudgpu.registry import Registry
from cloudgpu.remote import Machine, TransferStats
from cloudgpu.spec import load_job
from cloudgpu.state.store import Store
from tests.faults.record import digest, partials
from tests.lifecycle.helpers import job_file, store
from tests.lifecycle.test_sim_e2e import sim


def launch_proc(
    job: Path, home: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`cloudgpu launch JOB --yes` as its own process (read it with communicate())."""
    return subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env={**os.environ, **(env or {}), "CLOUDGPU_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def job_state(home: Path) -> str:
    jobs = store(home).jobs()
    return jobs[0].state if jobs else ""


class DropPlan:
    """Connects for real; the first ``drops`` operations of ``kind`` find the connection
    gone (its socket shut down under the live paramiko transport, as a reset NAT would):
    ``collect``: an output transfer; ``stage``: a data transfer; ``run``: the job's
    command, a second after it started."""

    def __init__(
        self, drops: int, kind: str = "collect", ckpt_due: Callable[[Path], bool] | None = None
    ) -> None:
        self.drops, self.kind = drops, kind
        self.connects = 0
        # ``ckpt``: a checkpoint sync into a local copy for which ckpt_due(local) holds is
        # cut once its first bytes arrived; what the local copy held right after is kept.
        self.ckpt_due = ckpt_due or (lambda _: True)
        self.after_cut: tuple[dict[str, str], list[Path]] | None = None

    def __call__(self, instance: Instance, **kw: Any) -> Machine:
        self.connects += 1
        kw["use_openssh"] = False
        machine = remote.connect(instance, **kw)
        assert isinstance(machine, remote.SSHMachine)
        return Dropping(machine, self)

    def take(self, kind: str) -> bool:
        if self.kind == kind and self.drops > 0:
            self.drops -= 1
            return True
        return False


class Dropping:
    def __init__(self, machine: remote.SSHMachine, plan: DropPlan) -> None:
        self.machine, self.plan = machine, plan
        self.nvme_path = machine.nvme_path

    def __getattr__(self, name: str) -> Any:
        return getattr(self.machine, name)

    def _cut(self) -> None:
        self.machine.transport.sock.shutdown(socket.SHUT_RDWR)

    def get_dir(self, src: str, local: Path, **kw: Any) -> TransferStats:
        if "/out" in src and self.plan.take("collect"):
            self._cut()
        if "/ckpt" in src and self.plan.kind == "ckpt" and self.plan.ckpt_due(local):
            return self._cut_midway(src, local)
        return self.machine.get_dir(src, local, **kw)

    def _cut_midway(self, src: str, local: Path) -> TransferStats:
        cut = []

        def progress(done: int, total: int) -> None:
            if 0 < done < total and not cut and self.plan.take("ckpt"):
                cut.append(done)
                self._cut()
                # What the transport had already buffered would still arrive whole (seen
                # on a loaded machine: the sync finished after the cut); a dead link
                # delivers nothing more, so this transfer ends here, as it would.
                raise remote.ConnectionLost("connection cut mid-sync by the fault harness")

        try:
            return self.machine.get_dir(src, local, progress=progress)
        finally:
            if cut:
                self.plan.after_cut = (digest(local), partials(local))

    def put_dir(self, local: Path, dst: str, **kw: Any) -> TransferStats:
        if "/data" in dst and self.plan.take("stage"):
            self._cut()
        return self.machine.put_dir(local, dst, **kw)

    def run(self, command: str, **kw: Any) -> int:
        if "cloudgpu-bootstrap" not in command and self.plan.take("run"):
            threading.Timer(1.0, self._cut).start()
        return self.machine.run(command, **kw)


def deps_for(home: Path, connect: Any) -> Deps:
    paths = default_paths({"CLOUDGPU_HOME": str(home)}).ensure()
    env = {"CLOUDGPU_HOME": str(home)}
    registry = Registry(load_config(paths.config_file), paths, env)
    s = Store.open(paths.state_db)
    sink = JobLog(paths.logs_dir / "guard.log", terminal=False)
    # Real waits, but the backoff between collection attempts is cut short.
    nap = lambda t: time.sleep(min(t, 0.2))  # noqa: E731
    return Deps(s, registry.get, paths, sink, s.owner_id(), connect, sleep=nap, env=env)


OUTPUTS = """
name: outs
resources: {gpu: L4}
run: |
  mkdir -p $CLOUDGPU_NVME/out
  head -c 3000000 /dev/urandom > $CLOUDGPU_NVME/out/model.bin
  echo done > $CLOUDGPU_NVME/out/status
outputs:
  - {src: /nvme/out, dst: ./results}
"""


def run_job(home: Path, tmp_path: Path, connect: Any, body: str = OUTPUTS) -> tuple[Deps, str]:
    deps = deps_for(home, connect)
    job = load_job(job_file(tmp_path, body))
    job_id = f"{job.name}-000001"
    create_job(deps.store, job, job_id, str(deps.paths.logs_dir / "guard.log"))
    offers = deps.provider("sim").offers()
    opts = LaunchOptions(grace_s=1, collect_grace_s=600)
    try:
        JobRun(deps, job_id, job, offers, opts).execute()
    finally:
        deps.store.add_event(job_id, "test", "run_job returned")
    return deps, job_id


def preempt_when(home: Path, pred: Any, notice: float, market: str = "spot") -> threading.Thread:
    """In the background: once ``pred(instance_dir)`` holds for the live spot instance,
    the cloud preempts it with ``notice`` seconds of warning."""

    def watch() -> None:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            for inst in sim(home).list_instances({}):
                if inst.market == market and pred(Path(inst.extra["dir"])):
                    sim(home).preempt(inst.id, notice=notice)
                    return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def step_at_least(n: int) -> Any:
    def pred(d: Path) -> bool:
        f = d / "nvme" / "ckpt" / "step"
        try:
            return int(f.read_text() or 0) >= n
        except (OSError, ValueError):
            return False

    return pred
