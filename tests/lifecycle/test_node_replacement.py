"""One node of a multi-node job lost mid-run (a spot notice, or vanished without one) on
the sim cloud: only that node is replaced, in the group's placement, the survivors keep
their instances, data and setup, and every node resumes from rank 0's checkpoint; rank 0
lost without notice resumes from the last sync; a node lost while the data is staged is
replaced the same way; a replacement the placement refuses (sim ``group_spares``) falls
back to a whole new group on the next offer; the client killed -9 as the replacement is
made leaves nothing `down --orphans` cannot sweep. Every test ends with no sim instance
left."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloudgpu.lifecycle.provision import NODE_RANK_TAG
from cloudgpu.state.store import InstanceRecord
from tests.faults.simkit import launch_proc
from tests.lifecycle.helpers import cli_proc, job_file, store, wait_for
from tests.lifecycle.test_sim_e2e import configure, job_state, live_sim, offer, sim, sweep

__all__ = ["sweep"]  # every test ends with no sim instance left

pytestmark = pytest.mark.slow

RESUMABLE = """
name: mn-resume
num_nodes: {nodes}
resources: {{gpu: L4, spot: auto}}
checkpoint: {{path: /nvme/ckpt, sync_every: 1s}}
setup: echo "setup on node $NODE_RANK"
run: |
  mkdir -p $CLOUDGPU_NVME/ckpt $CLOUDGPU_NVME/out
  cd $CLOUDGPU_NVME/ckpt
  step=$(cat step 2>/dev/null || echo 0)
  echo "starting at step $step"
  # {pace} s a step until the node is lost; a run that finds the checkpoint back: 0.01 s
  p={pace}; [ "$step" -gt 0 ] && p=0.01
  while [ "$step" -lt 30 ]; do
    step=$((step + 1))
    if [ "$NODE_RANK" = 0 ]; then
      echo "$step" > step.new && mv step.new step
    fi
    sleep $p
  done
  if [ "$NODE_RANK" = 0 ]; then echo "done at $step" > $CLOUDGPU_NVME/out/result.txt; fi
outputs:
  - {{src: /nvme/out, dst: ./results}}
"""


@dataclass
class Ran:
    code: int
    out: str
    err: str
    first: dict[int, str]  # rank -> provider id of the first group
    records: list[InstanceRecord]

    def starts(self) -> list[int]:
        return sorted(int(ln.split()[-1]) for ln in self.out.splitlines() if "starting at" in ln)


def _ranks(home: Path) -> dict[int, str]:
    jobs = store(home).jobs()
    recs = store(home).instances(jobs[0].id) if jobs else []
    return {int(r.tags[NODE_RANK_TAG]): r.provider_id for r in recs if r.provider_id}


def _step(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def lose_one(tmp_path: Path, home: Path, nodes: int, rank: int, how: str) -> Ran:
    """Launch the resumable job, let rank 0 make progress, then take ``rank`` away:
    ``notice`` (a spot preemption 3 s ahead) or ``vanish`` (gone at once, no notice)."""
    proc = launch_proc(job_file(tmp_path, RESUMABLE.format(nodes=nodes, pace=0.2)), home)
    try:
        wait_for(lambda: len(_ranks(home)) == nodes, 120, f"{nodes} nodes")
        wait_for(lambda: job_state(home) == "running", 120, "running")
        first = _ranks(home)
        d0 = Path(sim(home).describe(first[0]).extra["dir"])
        wait_for(lambda: _step(d0 / "nvme" / "ckpt" / "step") >= 3, 60, "progress on rank 0")
        local = home / "data" / "checkpoints" / store(home).jobs()[0].id / "step"
        wait_for(lambda: _step(local) >= 1, 60, "a checkpoint sync")  # what a vanish leaves
        if how == "notice":
            sim(home).preempt(first[rank], notice=3.0)
        else:
            sim(home).terminate(first[rank])
        out_b, err_b = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    records = store(home).instances(store(home).jobs()[0].id)
    return Ran(proc.returncode, out_b.decode(), err_b.decode(), first, records)


@pytest.mark.parametrize(
    ("nodes", "rank", "how"),
    [(2, 1, "notice"), (3, 2, "notice"), (2, 0, "vanish")],
    ids=["2-nodes-rank1-notice", "3-nodes-rank2-notice", "2-nodes-rank0-vanished"],
)
def test_only_the_lost_node_is_replaced_and_all_resume_from_the_checkpoint(
    tmp_path: Path, cloudgpu_home: Path, nodes: int, rank: int, how: str
) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    ran = lose_one(tmp_path, cloudgpu_home, nodes, rank, how)
    assert ran.code == 0, ran.err
    lost = ran.first[rank]
    assert f"node {rank} ({lost}) gone, billed $" in ran.err
    assert f"replacing it alone, {nodes - 1} node(s) kept" in ran.err
    # One create more than the group: the lost node's replacement, nothing else.
    assert len(ran.records) == nodes + 1
    by_id = {r.provider_id: r for r in ran.records}
    assert by_id[lost].state == "preempted"
    (new,) = [r for r in ran.records if r.provider_id not in ran.first.values()]
    assert new.tags[NODE_RANK_TAG] == str(rank) and new.market == "spot"
    assert f"node {rank} replaced by {new.provider_id}" in ran.err
    survivors = {r: i for r, i in ran.first.items() if r != rank}
    for r, iid in survivors.items():  # the same instances ran the job to its end
        assert by_id[iid].state == "terminated" and by_id[iid].tags[NODE_RANK_TAG] == str(r)
    group = {sim(cloudgpu_home).describe(r.provider_id).extra["group"] for r in ran.records}
    assert len(group) == 1 and group != {""}  # the replacement joined the group
    # Setup and data on the new node only; the survivors kept theirs.
    assert ran.out.count("setup on node") == nodes + 1
    assert ran.out.count(f"] setup on node {rank}") == 2
    starts = ran.starts()  # every node started over from the checkpoint, none from 0
    assert starts[:nodes] == [0] * nodes and len(starts) == 2 * nodes
    assert all(1 <= s < 30 for s in starts[nodes:]), starts
    if how == "vanish":  # rank 0 could not flush: the last sync is what resumed
        assert "checkpoint /nvme/ckpt not saved" in ran.err
    assert (tmp_path / "results" / "result.txt").read_text() == "done at 30\n"
    assert live_sim(cloudgpu_home) == []


def test_a_replacement_the_placement_refuses_replaces_the_whole_group(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(
        cloudgpu_home,
        [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)],
        group_spares=0,  # the group's placement takes no node beyond its first two
    )
    ran = lose_one(tmp_path, cloudgpu_home, 2, 1, "notice")
    assert ran.code == 0, ran.err
    assert (
        "node 1 cannot be replaced in its group: sim: no capacity for sim.spot in placement group"
        in ran.err
    )
    assert "all 2 nodes torn down; re-provisioning without sim/sim.spot" in ran.err
    kinds = sorted((r.instance_type, r.state, bool(r.provider_id)) for r in ran.records)
    assert kinds == [
        ("sim.od", "terminated", True),
        ("sim.od", "terminated", True),
        ("sim.spot", "preempted", True),  # rank 1
        ("sim.spot", "terminated", False),  # its refused replacement: never made
        ("sim.spot", "terminated", True),  # rank 0, gone with the group
    ]
    starts = ran.starts()
    assert starts[:2] == [0, 0] and len(starts) == 4 and all(3 <= s < 30 for s in starts[2:])
    assert ran.out.count("setup on node") == 4  # a new group: setup everywhere again
    assert (tmp_path / "results" / "result.txt").read_text() == "done at 30\n"
    assert live_sim(cloudgpu_home) == []


def test_a_node_lost_while_the_data_is_staged_is_replaced_alone(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    (tmp_path / "data").mkdir()
    for i in range(4):  # long enough to stage that rank 1 goes in the middle of it
        (tmp_path / "data" / f"shard-{i}.bin").write_bytes(bytes([i]) * 10_000_000)
    # Lost in staging, before the run: it may step fast from the start.
    staged = "data:\n  - {src: ./data, dst: /nvme/data}\noutputs:"
    job = RESUMABLE.format(nodes=2, pace=0.01).replace("outputs:", staged)
    proc = launch_proc(job_file(tmp_path, job), cloudgpu_home)
    try:
        wait_for(lambda: job_state(cloudgpu_home) == "staging", 120, "staging")
        first = _ranks(cloudgpu_home)
        sim(cloudgpu_home).terminate(first[1])
        out_b, err_b = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = err_b.decode()
    assert proc.returncode == 0, err
    assert f"node 1 ({first[1]}) gone" in err and "node 1 replaced by" in err
    recs = store(cloudgpu_home).instances(store(cloudgpu_home).jobs()[0].id)
    assert len(recs) == 3 and {r.provider_id: r.state for r in recs}[first[0]] == "terminated"
    # Rank 0 had its data but no setup yet when rank 1 went: it gets setup, not data.
    out = out_b.decode()
    assert out.count("setup on node") == 2 and "[node 0] setup on node 0" in out
    assert (tmp_path / "results" / "result.txt").read_text() == "done at 30\n"
    assert live_sim(cloudgpu_home) == []


def test_kill9_of_the_client_as_the_replacement_is_made_leaves_nothing_behind(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot")], boot_delay=2.0)
    proc = launch_proc(job_file(tmp_path, RESUMABLE.format(nodes=2, pace=0.2)), cloudgpu_home)
    try:
        wait_for(lambda: job_state(cloudgpu_home) == "running", 120, "running")
        first = _ranks(cloudgpu_home)
        sim(cloudgpu_home).preempt(first[1], notice=1.0)
        # The replacement is recorded before its create: kill the client right then.
        jid = store(cloudgpu_home).jobs()[0].id
        wait_for(lambda: len(store(cloudgpu_home).instances(jid)) == 3, 60, "the replacement")
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home, env={"CLOUDGPU_SIM": "1"})
    assert res.returncode == 0, res.stderr
    assert (
        live_sim(cloudgpu_home) == [] and store(cloudgpu_home).instances(jid, live_only=True) == []
    )
