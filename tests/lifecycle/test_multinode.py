"""Multi-node jobs end to end on the sim cloud: real torchrun (gloo) across 2 and 3
instances doing an all_reduce whose result is checked, a node failing mid-run tearing
every node down, all-or-nothing provisioning against capacity limits, and the pieces
(rendezvous env, node-prefixed lines, the planner's choice within a range)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.lifecycle.multinode import node_outputs
from cloudgpu.lifecycle.provision import Provisioned
from cloudgpu.lifecycle.rendezvous import NodeLines, master_port, rendezvous_env
from cloudgpu.planner import plan
from cloudgpu.provider import Instance, InstanceState
from cloudgpu.spec import load_job
from tests.lifecycle.helpers import job_file, main_exit, status_json
from tests.lifecycle.test_sim_e2e import configure, live_sim, offer, sweep
from tests.torchrun_job import HAS_TORCH, NO_TORCH, torch_job

__all__ = ["sweep"]  # every test ends with no sim instance left


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
@pytest.mark.parametrize("nodes", [2, 3])
def test_torchrun_all_reduce_across_sim_nodes(
    tmp_path: Path, cloudgpu_home: Path, nodes: int
) -> None:
    configure(cloudgpu_home, [offer("sim.gpu", 0.5)])
    code, out, err = main_exit(["launch", str(torch_job(tmp_path, nodes)), "--yes"])
    assert code == 0, err
    result = json.loads((tmp_path / "results" / "result.json").read_text())
    assert result == {
        "world": nodes,
        "sum": nodes * (nodes + 1) / 2,
        "nodes": ",".join(["127.0.0.1"] * nodes),
    }
    for rank in range(nodes):  # every node's output, prefixed with its rank
        assert f"[node {rank}] rank {rank}/{nodes} node {rank} sum" in out
    (row,) = status_json(cloudgpu_home)
    assert row["state"] == "succeeded"
    assert [i["state"] for i in row["instances"]] == ["terminated"] * nodes
    assert live_sim(cloudgpu_home) == []


@pytest.mark.slow
def test_a_node_failing_mid_run_stops_and_tears_down_every_node(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.gpu", 0.5)])
    run = (
        'if [ "$NODE_RANK" = 1 ]; then sleep 1; echo "node one fails"; exit 9; fi; '
        'echo "rank $NODE_RANK waiting"; sleep 300'
    )
    code, out, err = main_exit(["launch", str(torch_job(tmp_path, 3, run)), "--yes"])
    assert code == 9, err  # the job's own code (one not among cloudgpu's: 2-7, 130)
    assert "run failed on node 1 (exit code 9): stopped the other nodes" in err
    assert "[node 1] node one fails" in out and "[node 2] rank 2 waiting" in out
    (row,) = status_json(cloudgpu_home)
    assert row["state"] == "failed"
    assert [i["state"] for i in row["instances"]] == ["terminated"] * 3
    assert live_sim(cloudgpu_home) == []


@pytest.mark.slow
def test_all_or_nothing_against_capacity(tmp_path: Path, cloudgpu_home: Path) -> None:
    # The cheap type has room for 2 instances only: a 3-node job must not keep those 2.
    configure(
        cloudgpu_home,
        [offer("sim.cheap", 0.2), offer("sim.roomy", 0.9)],
        capacity={"sim.cheap": 2},
    )
    code, out, err = main_exit(
        ["launch", str(torch_job(tmp_path, 3, "echo up on $NODE_RANK")), "--yes"]
    )
    assert code == 0, err
    assert "provisioning 3 x sim sim.cheap" in err and "not available" in err
    (row,) = status_json(cloudgpu_home)
    assert row["instance_type"] == "sim.roomy"
    states = [i["state"] for i in row["instances"]]
    # 3 records for the refused group (2 made and rolled back, 1 refused) + 3 used.
    assert states.count("terminated") == len(states) == 6
    assert sorted(f"[node {r}] up on {r}" in out for r in range(3)) == [True] * 3
    assert live_sim(cloudgpu_home) == []


@pytest.mark.slow
def test_range_lets_the_planner_choose(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.gpu", 0.5)])
    code, out, err = main_exit(
        ["launch", str(torch_job(tmp_path, "1-3", "echo n=$NNODES")), "--yes"]
    )
    assert code == 0, err
    # No workload to estimate: hourly price decides, so the fewest nodes win.
    assert "[node 0] n=1" in out and live_sim(cloudgpu_home) == []


# -- the pieces ----------------------------------------------------------------------------


def _node(i: int, gpus: int = 8) -> Provisioned:
    o = Offer("x", "t", "r", "z", "on_demand", "H100-SXM", gpus, 80, 96, 1000, 10.0)
    inst = Instance(f"n{i}", "x", InstanceState.RUNNING, private_address=f"10.0.0.{i + 1}")
    return Provisioned(f"i-{i}", None, inst, o, 0.0)  # type: ignore[arg-type]


def test_rendezvous_env() -> None:
    nodes = [_node(i) for i in range(4)]
    env = rendezvous_env(nodes, 2, 29511)
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "29511"
    assert (env["NODE_RANK"], env["NNODES"], env["GPUS_PER_NODE"], env["WORLD_SIZE"]) == (
        "2", "4", "8", "32",
    )  # fmt: skip
    assert env["CLOUDGPU_NODE_IPS"] == "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4"
    assert env["CLOUDGPU_TORCHRUN"] == (
        "torchrun --nnodes=4 --node_rank=2 --nproc_per_node=8 "
        "--master_addr=10.0.0.1 --master_port=29511"
    )
    assert 29500 <= master_port("job-a") < 29900 and master_port("job-a") == master_port("job-a")


class _Sink:
    def __init__(self) -> None:
        self.lines: list[tuple[bytes, bool]] = []

    def job_output(self, data: bytes, *, stderr: bool = False) -> None:
        self.lines.append((data, stderr))


PER_NODE_RUN = (
    'mkdir -p "$CLOUDGPU_NVME/logs" "$CLOUDGPU_NVME/out"; '
    'echo "log of $NODE_RANK" > "$CLOUDGPU_NVME/logs/rank.txt"; '
    'echo "model of $NODE_RANK" > "$CLOUDGPU_NVME/out/model.txt"'
)


def per_node_job(tmp_path: Path) -> Path:
    """Two nodes, each writing its own model.txt and rank.txt: outputs from rank 0, and
    the logs from every node."""
    return job_file(
        tmp_path,
        f"""
name: logs
num_nodes: 2
resources: {{gpu: L4}}
run: {json.dumps(PER_NODE_RUN)}
outputs:
  - {{src: /nvme/out, dst: ./results}}
  - {{src: /nvme/logs, dst: ./logs, all_nodes: true}}
""",
    )


def each_node_s_share(tmp_path: Path) -> None:
    assert (tmp_path / "results" / "model.txt").read_text() == "model of 0\n"  # rank 0's only
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["node-0", "node-1"]
    for rank in range(2):
        assert (tmp_path / "logs" / f"node-{rank}" / "rank.txt").read_text() == f"log of {rank}\n"


@pytest.mark.slow
def test_all_nodes_outputs_come_from_every_node_into_their_own_folders(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.gpu", 0.5)])
    code, _, err = main_exit(["launch", str(per_node_job(tmp_path)), "--yes"])
    assert code == 0, err
    each_node_s_share(tmp_path)
    assert live_sim(cloudgpu_home) == []


@pytest.mark.slow
def test_down_collects_each_node_s_own_share_of_a_kept_job(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    """`down JOB` on kept nodes: rank 0's outputs (never another node's files over
    them) and the all_nodes ones from each node into DST/node-R."""
    configure(cloudgpu_home, [offer("sim.gpu", 0.5)])
    job = per_node_job(tmp_path)
    code, _, err = main_exit(["launch", str(job), "--yes", "--keep"])
    assert code == 0, err
    assert len(live_sim(cloudgpu_home)) == 2
    shutil.rmtree(tmp_path / "results")
    shutil.rmtree(tmp_path / "logs")
    (row,) = status_json(cloudgpu_home)
    code, _, err = main_exit(["down", row["id"], "--collect", "--yes"])
    assert code == 0, err
    each_node_s_share(tmp_path)
    assert live_sim(cloudgpu_home) == []


def test_node_outputs_and_the_all_nodes_key(tmp_path: Path) -> None:
    job = load_job(
        job_file(
            tmp_path,
            "name: x\nrun: y\nnum_nodes: 2\noutputs:\n  - {src: /nvme/out, dst: ./r}\n"
            "  - {src: /nvme/logs, dst: s3://bkt/logs/, all_nodes: true}\n",
        )
    )
    assert [(o.src, o.dst) for o in node_outputs(job.outputs, 0)] == [
        ("/nvme/out", "./r"),
        ("/nvme/logs", "s3://bkt/logs/node-0"),
    ]
    assert [(o.src, o.dst) for o in node_outputs(job.outputs, 1)] == [
        ("/nvme/logs", "s3://bkt/logs/node-1")
    ]
    bad = job_file(tmp_path, "name: x\nrun: y\noutputs: [{src: /nvme/o, dst: ./o, all_nodes: 3}]\n")
    code, _, err = main_exit(["schema", "--check", str(bad)])
    assert code == 2 and "all_nodes" in err


def test_node_lines_prefix_whole_lines() -> None:
    sink = _Sink()
    nl = NodeLines(sink, 3, False)  # type: ignore[arg-type]
    nl(b"par")
    nl(b"tial\nsecond\nthi")
    nl.flush()
    assert [d for d, _ in sink.lines] == [
        b"[node 3] partial\n",
        b"[node 3] second\n",
        b"[node 3] thi\n",
    ]


def test_planner_chooses_within_a_range_by_cost_time_and_interconnect(tmp_path: Path) -> None:
    """A 1B model on 50B tokens: cheapest is one node (scaling only adds overhead);
    fastest is four; under a 10 h limit only the fast interconnect's four nodes make it
    (25 Gb/s Ethernet drowns four nodes' gradient all-reduce)."""

    def job(extra: str) -> object:
        body = "name: x\nrun: y\nresources: {gpu: H100}\n"
        body += "workload: {kind: train, params: 1B, tokens: 50B}\n" + 'num_nodes: "1-4"\n'
        return load_job(job_file(tmp_path, body + extra))

    efa = Offer("aws", "p5.48xlarge", "r", "a", "on_demand", "H100-SXM", 8, 80, 192, 2048, 55.0,
                network_gbps=3200)  # fmt: skip
    eth = Offer("x", "eth8", "r", "a", "on_demand", "H100-SXM", 8, 80, 192, 2048, 40.0,
                network_gbps=25)  # fmt: skip
    reg = load_registry()

    def picks(extra: str, objective: str) -> list[tuple[str, int]]:
        result = plan(job(extra), [efa, eth], registry=reg, objective=objective)  # type: ignore[arg-type]
        return [(c.offer.instance_type, c.num_nodes) for c in result.candidates]

    assert picks("", "cheapest") == [("eth8", 1), ("p5.48xlarge", 1)]
    assert picks("", "fastest") == [("p5.48xlarge", 4), ("eth8", 4)]
    assert picks("limits: {max_runtime: 10h}\n", "cheapest") == [("p5.48xlarge", 4)]
