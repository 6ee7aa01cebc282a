"""The lifecycle's guarantees under faults, on the sim cloud (real sshd instances).

Signals while the job runs (outputs collected, checkpoint flushed, then teardown), a
second signal skipping collection, a connection dropped mid-collection (retried over a
fresh connection; when it keeps failing the instance is kept and `down --collect`
fetches the outputs), the preemption limit falling back to on demand, and the
instance-side deadline derived from max_cost. Every test ends with no sim instance left.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudgpu import remote
from cloudgpu.config import load_config
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.collect import OutputsNotCollected
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.down import down_job
from cloudgpu.lifecycle.launch import create_job
from cloudgpu.lifecycle.output import JobLog
from cloudgpu.lifecycle.reaper import reap
from cloudgpu.lifecycle.run import JobRun, LaunchOptions
from cloudgpu.paths import default_paths
from cloudgpu.provider import Instance
from cloudgpu.registry import Registry
from cloudgpu.remote import Machine, ProgressFn, TransferStats
from cloudgpu.spec import load_job
from cloudgpu.state.store import Store
from tests.lifecycle.helpers import cli_proc, job_file, store, wait_for
from tests.lifecycle.test_sim_e2e import configure, live_sim, offer, sim

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def sweep(cloudgpu_home: Path) -> Iterator[None]:
    yield
    p = sim(cloudgpu_home)
    for d in sorted((cloudgpu_home / "data" / "sim").glob("sim-*")):
        p.terminate(d.name)


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def partials(root: Path) -> list[Path]:
    return [p for p in root.rglob(".cgpu-*")] if root.exists() else []


STEPPING = """
name: stepping
resources: {{gpu: L4}}
checkpoint: /nvme/ckpt
run: |
  mkdir -p $CLOUDGPU_NVME/out $CLOUDGPU_NVME/ckpt
  {make_out}
  i=0
  while [ $i -lt 600 ]; do
    i=$((i + 1)); echo $i > $CLOUDGPU_NVME/ckpt/step; echo "step $i" >> $CLOUDGPU_NVME/out/log
    sleep 0.1
  done
outputs:
  - {{src: /nvme/out, dst: ./results}}
"""


def launch_proc(job: Path, home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env={**os.environ, "CLOUDGPU_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def job_state(home: Path) -> str:
    jobs = store(home).jobs()
    return jobs[0].state if jobs else ""


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_signal_while_running_collects_then_tears_down(
    tmp_path: Path, cloudgpu_home: Path, sig: signal.Signals
) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    results = tmp_path / "results"
    results.mkdir()
    (results / "mine.txt").write_text("the user's own file\n")
    before = digest(results)
    proc = launch_proc(job_file(tmp_path, STEPPING.format(make_out=":")), cloudgpu_home)
    try:
        wait_for(lambda: job_state(cloudgpu_home) == "running", timeout=120, what="running")
        (inst,) = sim(cloudgpu_home).list_instances({})
        step = Path(inst.extra["dir"]) / "nvme" / "ckpt" / "step"
        wait_for(lambda: step.exists() and int(step.read_text() or 0) >= 5, what="progress")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.decode()
    assert proc.returncode == 130, text
    assert "interrupted: stopping the job" in text
    log = (results / "log").read_text().splitlines()  # what the job did before the signal
    assert len(log) >= 5 and log[0] == "step 1"
    assert digest(results)["mine.txt"] == before["mine.txt"]
    ckpt = cloudgpu_home / "data" / "checkpoints"
    (saved,) = list(ckpt.glob("*/step"))
    assert int(saved.read_text()) >= 5
    assert live_sim(cloudgpu_home) == []
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "interrupted"
    assert {i.state for i in store(cloudgpu_home).instances()} == {"terminated"}


def test_second_signal_skips_collection_and_keeps_the_users_file(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    results = tmp_path / "results"
    results.mkdir()
    (results / "blob").write_bytes(b"the previous good blob\n" * 1000)
    before = digest(results)
    job = job_file(
        tmp_path,
        """
name: bigout
resources: {gpu: L4}
run: mkdir -p $CLOUDGPU_NVME/out && head -c 1500000000 /dev/zero > $CLOUDGPU_NVME/out/blob
outputs:
  - {src: /nvme/out, dst: ./results}
""",
    )
    proc = launch_proc(job, cloudgpu_home)
    try:
        wait_for(lambda: job_state(cloudgpu_home) == "collecting", timeout=180, what="collecting")
        wait_for(lambda: bool(partials(results)), timeout=60, what="a partial file")
        proc.send_signal(signal.SIGINT)  # first: collection goes on
        time.sleep(0.3)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)  # second: skip it, tear down now
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err.decode()
    assert digest(results) == before  # never replaced by a truncated copy
    assert partials(results) == []
    assert live_sim(cloudgpu_home) == []


# -- a connection dropped while collecting ------------------------------------------------


class DropPlan:
    """Connects for real; the first ``drops`` output transfers find the connection gone
    (its socket shut down under the live paramiko transport, as a reset NAT would)."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.connects = 0

    def __call__(self, instance: Instance, **kw: Any) -> Machine:
        self.connects += 1
        kw["use_openssh"] = False
        machine = remote.connect(instance, **kw)
        assert isinstance(machine, remote.SSHMachine)
        return Dropping(machine, self)


class Dropping:
    def __init__(self, machine: remote.SSHMachine, plan: DropPlan) -> None:
        self.machine, self.plan = machine, plan
        self.nvme_path = machine.nvme_path

    def __getattr__(self, name: str) -> Any:
        return getattr(self.machine, name)

    def get_dir(
        self, src: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        if self.plan.drops > 0 and "/out" in src:
            self.plan.drops -= 1
            self.machine.transport.sock.shutdown(socket.SHUT_RDWR)
        return self.machine.get_dir(src, local, progress=progress)


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


def test_a_dropped_collection_is_retried_over_a_new_connection(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    results = tmp_path / "results"
    results.mkdir()
    (results / "model.bin").write_bytes(b"last week's model")
    plan = DropPlan(drops=2)
    deps, job_id = run_job(cloudgpu_home, tmp_path, plan)
    assert plan.drops == 0 and plan.connects == 3  # the first, then one per retry
    assert (results / "status").read_text() == "done\n"
    assert (results / "model.bin").stat().st_size == 3_000_000
    assert partials(results) == []
    assert deps.store.job(job_id).state == "succeeded"
    assert live_sim(cloudgpu_home) == []


def test_uncollectable_outputs_keep_the_instance_for_down_collect(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    results = tmp_path / "results"
    results.mkdir()
    (results / "model.bin").write_bytes(b"last week's model")
    before = digest(results)
    with pytest.raises(OutputsNotCollected) as err:
        run_job(cloudgpu_home, tmp_path, DropPlan(drops=99))
    exc = err.value
    assert exc.exit_code == 5 and exc.until is not None
    assert "outputs not collected after 4 attempts" in str(exc)
    assert "/nvme/out (for " in str(exc) and "down outs-000001 --collect" in (exc.hint or "")
    assert 550 < exc.until - time.time() <= 600
    assert digest(results) == before and partials(results) == []
    assert len(live_sim(cloudgpu_home)) == 1  # not destroyed with the outputs on it
    s = store(cloudgpu_home)
    assert s.job("outs-000001").state == states.KEPT
    res = cli_proc(["down", "outs-000001", "--collect"], cloudgpu_home)  # no terminal
    assert res.returncode == 2 and "confirm with --yes" in res.stderr
    res = cli_proc(["down", "outs-000001", "--collect", "--yes"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    assert (results / "status").read_text() == "done\n"
    assert (results / "model.bin").stat().st_size == 3_000_000
    assert live_sim(cloudgpu_home) == []
    assert store(cloudgpu_home).job("outs-000001").state == "stopped"


def test_the_grace_ends_with_one_last_collection_then_teardown(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    with pytest.raises(OutputsNotCollected):
        run_job(cloudgpu_home, tmp_path, DropPlan(drops=4))
    assert len(live_sim(cloudgpu_home)) == 1
    deps = deps_for(cloudgpu_home, DropPlan(drops=0))
    assert reap(deps, "outs-000001", idle_s=3600, until=time.time())  # the grace is over
    assert (tmp_path / "results" / "status").read_text() == "done\n"
    assert live_sim(cloudgpu_home) == []


def test_down_collect_that_fails_keeps_the_instance(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    with pytest.raises(OutputsNotCollected):
        run_job(cloudgpu_home, tmp_path, DropPlan(drops=4))
    deps = deps_for(cloudgpu_home, DropPlan(drops=99))
    failures = down_job(deps, deps.store.job("outs-000001"), collect=True)
    assert failures and "instance kept" in failures[0]
    assert len(live_sim(cloudgpu_home)) == 1
    failures = down_job(deps, deps.store.job("outs-000001"), collect=False)
    assert failures == [] and live_sim(cloudgpu_home) == []


# -- preemptions ---------------------------------------------------------------------


def test_preemption_limit_falls_back_to_on_demand(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(
        cloudgpu_home,
        [offer("sim.spot-a", 0.2, "spot"), offer("sim.spot-b", 0.25, "spot"), offer("sim.od", 0.9)],
        preempt_after=1.5,
        preempt_notice=0.5,
    )
    body = """
name: fallback
resources: {gpu: L4, spot: auto}
limits: {max_preemptions: 1}
run: sleep 4; echo finished
"""
    deps, job_id = run_job(cloudgpu_home, tmp_path, remote.connect, body)
    insts = deps.store.instances(job_id)
    assert [(i.instance_type, i.state) for i in insts] == [
        ("sim.spot-a", "preempted"),
        ("sim.od", "terminated"),
    ]
    assert deps.store.job(job_id).state == "succeeded"
    log = (deps.paths.logs_dir / "guard.log").read_text()
    assert "preempted 1 times (max_preemptions 1): continuing on on-demand offers" in log


def test_spot_only_job_gives_up_at_the_limit(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(
        cloudgpu_home,
        [offer("sim.spot-a", 0.2, "spot"), offer("sim.od", 0.9)],
        preempt_after=1.0,
        preempt_notice=0.5,
    )
    body = """
name: spotonly
resources: {gpu: L4, spot: true}
limits: {max_preemptions: 1}
run: sleep 30
"""
    with pytest.raises(Exception, match="preempted 1 times"):
        run_job(cloudgpu_home, tmp_path, remote.connect, body)
    assert live_sim(cloudgpu_home) == []


def test_instance_deadline_from_max_cost(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.small", 3.6)])
    deps = deps_for(cloudgpu_home, remote.connect)
    body = "name: dl\nresources: {gpu: L4}\nrun: sleep 1\nlimits: {max_cost: 0.01}\n"
    job = load_job(job_file(tmp_path, body))
    o = deps.provider("sim").offers()[0]
    run = JobRun(deps, "dl-1", job, [o], LaunchOptions(grace_s=5, default_deadline_s=86400))
    assert run.deadline(o) == pytest.approx(time.time() + 10 + 5, abs=2)  # $0.01 at $3.6/h
    body = "name: dl\nresources: {gpu: L4}\nrun: sleep 1\n"
    run = JobRun(deps, "dl-2", load_job(job_file(tmp_path, body)), [o], LaunchOptions(grace_s=5))
    assert run.deadline(o) == pytest.approx(time.time() + 86400 + 5, abs=2)  # the default


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


COUNTER = """
name: counter
resources: {gpu: L4, spot: auto}
checkpoint: {path: /nvme/ckpt, sync_every: 1s}
run: |
  mkdir -p $CLOUDGPU_NVME/ckpt $CLOUDGPU_NVME/out
  step=$(cat $CLOUDGPU_NVME/ckpt/step 2>/dev/null || echo 0)
  echo "starting at $step" | tee -a $CLOUDGPU_NVME/out/starts
  while [ "$step" -lt 40 ]; do
    step=$((step + 1)); echo $step > $CLOUDGPU_NVME/ckpt/step; sleep 0.1
  done
  echo "done at $step" > $CLOUDGPU_NVME/out/result
outputs:
  - {src: /nvme/out, dst: ./results}
"""


def test_preemption_without_notice_resumes_from_the_periodic_checkpoint(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    preempt_when(cloudgpu_home, step_at_least(20), notice=0.0)
    deps, job_id = run_job(cloudgpu_home, tmp_path, remote.connect, COUNTER)
    assert (tmp_path / "results" / "result").read_text() == "done at 40\n"
    resumed_at = int((tmp_path / "results" / "starts").read_text().split()[-1])
    assert 5 <= resumed_at < 40  # from a periodic sync: no notice ever came
    assert [(i.market, i.state) for i in deps.store.instances(job_id)] == [
        ("spot", "preempted"),
        ("on_demand", "terminated"),
    ]
    assert deps.store.job(job_id).state == "succeeded"
    assert live_sim(cloudgpu_home) == []


def test_notice_during_staging_restages_on_the_next_instance(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    data = tmp_path / "dataset"
    data.mkdir()
    for i in range(4):
        (data / f"part-{i}").write_bytes(os.urandom(50_000_000))
    body = """
name: staged
resources: {gpu: L4, spot: auto}
data: [{src: ./dataset, dst: /nvme/data}]
run: test $(ls $CLOUDGPU_NVME/data | wc -l) -eq 4 && cat $CLOUDGPU_NVME/data/* | wc -c
"""

    def staging(d: Path) -> bool:
        return any((d / "nvme" / "data").glob("*")) if (d / "nvme" / "data").exists() else False

    preempt_when(cloudgpu_home, staging, notice=1.0)
    deps, job_id = run_job(cloudgpu_home, tmp_path, remote.connect, body)
    assert deps.store.job(job_id).state == "succeeded"
    assert [i.market for i in deps.store.instances(job_id)] == ["spot", "on_demand"]
    assert "200000000" in (deps.paths.logs_dir / "guard.log").read_text()
    assert live_sim(cloudgpu_home) == []


def test_notice_during_collection_finishes_it_and_never_reruns(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    body = """
name: collected
resources: {gpu: L4, spot: auto}
run: |
  mkdir -p $CLOUDGPU_NVME/out; echo ran >> $CLOUDGPU_NVME/out/runs
  head -c 400000000 /dev/urandom > $CLOUDGPU_NVME/out/blob
outputs:
  - {src: /nvme/out, dst: ./results}
"""
    home = cloudgpu_home

    def collecting(d: Path) -> bool:
        return bool(store(home).jobs()) and store(home).jobs()[0].state == "collecting"

    preempt_when(home, collecting, notice=60.0)
    deps, job_id = run_job(home, tmp_path, remote.connect, body)
    assert (tmp_path / "results" / "runs").read_text() == "ran\n"
    assert (tmp_path / "results" / "blob").stat().st_size == 400_000_000
    assert [i.market for i in deps.store.instances(job_id)] == ["spot"]  # not re-run
    assert deps.store.job(job_id).state == "succeeded"
    assert live_sim(cloudgpu_home) == []
