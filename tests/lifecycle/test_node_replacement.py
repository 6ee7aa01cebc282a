"""One node of a multi-node job lost mid-run (a spot notice, or vanished without one) on
the sim cloud: only that node is replaced, in the group's placement, the survivors keep
their instances, data and setup, and every node resumes from rank 0's checkpoint; rank 0
lost without notice resumes from the last sync; a replacement the placement refuses
(sim ``group_spares``) falls back to a whole new group on the next offer. Every test
ends with no sim instance left."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloudgpu.lifecycle.provision import NODE_RANK_TAG
from cloudgpu.state.store import InstanceRecord
from tests.lifecycle.helpers import job_file, store, wait_for
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
  while [ "$step" -lt 30 ]; do
    step=$((step + 1))
    if [ "$NODE_RANK" = 0 ]; then
      echo "$step" > step.new && mv step.new step
    fi
    sleep 0.2
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
    job = job_file(tmp_path, RESUMABLE.format(nodes=nodes))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env={**os.environ, "CLOUDGPU_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
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
