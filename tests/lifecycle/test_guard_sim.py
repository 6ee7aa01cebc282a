"""The lifecycle's guarantees under faults, on the sim cloud (real sshd instances).

A second signal skipping collection, a connection dropped mid-collection (retried over
a fresh connection; when it keeps failing the instance is kept and `down --collect`
fetches the outputs), the preemption limit falling back to on demand, a preemption
without notice resumed from the periodic checkpoint sync, and the instance-side deadline
derived from max_cost. The fault matrix (tests/faults) covers the rest. Every test ends
with no sim instance left.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu import remote
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.collect import OutputsNotCollected
from cloudgpu.lifecycle.down import down_job
from cloudgpu.lifecycle.reaper import reap
from cloudgpu.lifecycle.run import JobRun, LaunchOptions
from cloudgpu.spec import load_job
from tests.faults.record import digest, partials
from tests.faults.simkit import (
    DropPlan,
    deps_for,
    job_state,
    launch_proc,
    preempt_when,
    run_job,
)
from tests.lifecycle.helpers import cli_proc, job_file, store, wait_for
from tests.lifecycle.test_sim_e2e import configure, live_sim, offer, sim

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def sweep(cloudgpu_home: Path) -> Iterator[None]:
    yield
    p = sim(cloudgpu_home)
    for d in sorted((cloudgpu_home / "data" / "sim").glob("sim-*")):
        p.terminate(d.name)


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
    assert "outputs not collected after 4 attempt(s)" in str(exc)
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


COUNTER = """
name: counter
resources: {gpu: L4, spot: auto}
checkpoint: {path: /nvme/ckpt, sync_every: 1s}
run: |
  mkdir -p $CLOUDGPU_NVME/ckpt $CLOUDGPU_NVME/out
  step=$(cat $CLOUDGPU_NVME/ckpt/step 2>/dev/null || echo 0)
  echo "starting at $step" | tee -a $CLOUDGPU_NVME/out/starts
  while [ "$step" -lt 80 ]; do
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
    synced = cloudgpu_home / "data" / "checkpoints" / "counter-000001" / "step"

    def after_a_sync(d: Path) -> bool:  # the client holds a periodic copy by then
        try:
            return int(synced.read_text() or 0) >= 5
        except (OSError, ValueError):
            return False

    preempt_when(cloudgpu_home, after_a_sync, notice=0.0)
    deps, job_id = run_job(cloudgpu_home, tmp_path, remote.connect, COUNTER)
    assert (tmp_path / "results" / "result").read_text() == "done at 80\n"
    resumed_at = int((tmp_path / "results" / "starts").read_text().split()[-1])
    assert 5 <= resumed_at < 80  # from a periodic sync: no notice ever came
    assert [(i.market, i.state) for i in deps.store.instances(job_id)] == [
        ("spot", "preempted"),
        ("on_demand", "terminated"),
    ]
    assert deps.store.job(job_id).state == "succeeded"
    assert live_sim(cloudgpu_home) == []


def test_status_refresh_records_an_instance_that_ended_by_itself(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    job = job_file(tmp_path, "name: kept\nresources: {gpu: L4}\nrun: echo hi\n")
    assert cli_proc(["launch", str(job), "--yes", "--keep"], cloudgpu_home).returncode == 0
    (inst,) = sim(cloudgpu_home).list_instances({})
    sim(cloudgpu_home).preempt(inst.id, notice=0.0)  # gone while no client watches
    wait_for(lambda: sim(cloudgpu_home).describe(inst.id).state.is_gone, what="preempted")
    ended = sim(cloudgpu_home).describe(inst.id).ended_at
    assert ended is not None
    plain = json.loads(cli_proc(["status", "--json"], cloudgpu_home).stdout)
    assert [i["state"] for i in plain[0]["instances"]] == ["running"]  # store only: fast
    res = cli_proc(["status", "--refresh", "--json"], cloudgpu_home, env={"CLOUDGPU_SIM": "1"})
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    assert [i["state"] for i in row["instances"]] == ["preempted"]
    assert row["state"] == "stopped"
    (spend,) = store(cloudgpu_home).spend(job_id=row["id"])
    assert spend.ended_at == pytest.approx(ended)  # billed up to when it really ended
    assert "preempted (recorded running)" in res.stderr


def test_plain_status_marks_what_it_cannot_vouch_for(cloudgpu_home: Path) -> None:
    s = store(cloudgpu_home)
    s.add_job("orphaned-0001", "orphaned", {}, state="running")
    s.update_job("orphaned-0001", pid=99999999)  # its client is gone
    s.add_job("fine-0002", "fine", {}, state="succeeded")
    res = cli_proc(["status"], cloudgpu_home)
    assert res.returncode == 0
    assert "running?" in res.stdout and "succeeded?" not in res.stdout
    assert "status --refresh" in res.stdout
    rows = json.loads(cli_proc(["status", "--json"], cloudgpu_home).stdout)
    assert {r["id"]: r["unconfirmed"] for r in rows} == {"orphaned-0001": True, "fine-0002": False}
