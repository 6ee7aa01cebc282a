"""`cloudgpu launch` end to end on the sim cloud: real sshd instances on 127.0.0.1.

Data and outputs, failover past offers with no capacity, spot preemption and resume
from the checkpoint, the instance-side deadline with no client, and a full /nvme (kill -9
of the client at every stage is in the fault matrix, tests/faults). Every test ends with no sim
instance left (the fixture sweeps whatever a failing test leaves behind).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.sim import SimProvider

from cloudgpu.paths import default_paths
from cloudgpu.provider import InstanceState, ProviderContext
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, status_json, store, wait_for

pytestmark = pytest.mark.slow

OFFER = {
    "gpu": "L4",
    "gpu_count": 1,
    "gpu_memory_gb": 24,
    "vcpus": 4,
    "memory_gb": 16,
    "nvme_count": 1,
    "nvme_size_gb": 250,
}


def offer(instance_type: str, price: float, market: str = "on_demand") -> dict[str, Any]:
    return {**OFFER, "instance_type": instance_type, "price_per_hour": price, "market": market}


def configure(home: Path, offers: list[dict[str, Any]], **sim: Any) -> None:
    lines = [
        "[launch]",
        "ssh_timeout = 60",
        "deadline_grace = 1",
        "",
        "[providers.local]",
        "enabled = false",
        "",
        "[providers.sim]",
        "enabled = true",
    ]
    for k, v in sim.items():
        lines.append(f"{k} = {json.dumps(v)}" if not isinstance(v, dict) else "")
    for k, v in sim.items():
        if isinstance(v, dict):
            lines += [f"[providers.sim.{k}]", *(f'"{a}" = {b}' for a, b in v.items())]
    for o in offers:
        lines.append("[[providers.sim.offers]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in o.items()]
    cfg = home / "config" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("\n".join(lines) + "\n")


def sim(home: Path) -> SimProvider:
    paths = default_paths({"CLOUDGPU_HOME": str(home)})
    return SimProvider(ProviderContext(config={"enabled": True}, paths=paths, env={}))


def live_sim(home: Path) -> list[str]:
    return [i.id for i in sim(home).list_instances({})]


@pytest.fixture(autouse=True)
def sweep(cloudgpu_home: Path) -> Iterator[None]:
    yield
    p = sim(cloudgpu_home)
    for d in sorted((cloudgpu_home / "data" / "sim").glob("sim-*")):
        p.terminate(d.name)


def data_dir(tmp_path: Path, files: int = 30) -> Path:
    d = tmp_path / "dataset"
    (d / "shards").mkdir(parents=True)
    for i in range(files):
        (d / "shards" / f"part-{i:03d}.txt").write_text(f"record {i}\n" * (i + 1))
    return d


@pytest.mark.parametrize("namespaces", [True, False], ids=["own-nvme", "plain-processes"])
def test_data_and_outputs_on_sim(tmp_path: Path, cloudgpu_home: Path, namespaces: bool) -> None:
    # namespaces=false is what sim does without root: /nvme is then a path on this host.
    configure(cloudgpu_home, [offer("sim.small", 0.9)], namespaces=namespaces)
    data_dir(tmp_path)
    job = job_file(
        tmp_path,
        """
name: sim-data
resources: {gpu: L4, local_nvme: 100GB+}
data:
  - {src: ./dataset, dst: /nvme/data}
run: |
  test -d $CLOUDGPU_NVME/data/shards
  mkdir -p $CLOUDGPU_NVME/out
  cat $CLOUDGPU_NVME/data/shards/*.txt | wc -l > $CLOUDGPU_NVME/out/lines.txt
  echo "counted $(cat $CLOUDGPU_NVME/out/lines.txt) lines"
outputs:
  - {src: /nvme/out, dst: ./results}
""",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert (tmp_path / "results" / "lines.txt").read_text().strip() == str(sum(range(1, 31)))
    assert "counted 465 lines" in out
    assert "host key" not in err  # sim reports its fingerprint: verified, nothing to pin
    (row,) = status_json(cloudgpu_home)
    assert row["provider"] == "sim" and row["state"] == "succeeded"
    assert [i["state"] for i in row["instances"]] == ["terminated"]
    (spend,) = store(cloudgpu_home).spend(job_id=row["id"])
    assert spend.price_per_hour == 0.9 and spend.cost == pytest.approx(
        0.9 * spend.billed_seconds / 3600
    )
    assert live_sim(cloudgpu_home) == []


def test_failover_past_two_offers_without_capacity(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(
        cloudgpu_home,
        [offer("sim.a", 0.5), offer("sim.b", 0.6), offer("sim.c", 0.7)],
        capacity={"sim.a": 0, "sim.b": 0},
    )
    job = job_file(tmp_path, "name: failover\nresources: {gpu: L4}\nrun: echo ran here\n")
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert err.count("not available: sim: no capacity") == 2
    assert "sim.a" in err and "sim.b" in err and "ran here" in out
    (row,) = status_json(cloudgpu_home)
    assert row["instance_type"] == "sim.c"
    assert [i["state"] for i in row["instances"]] == ["terminated"] * 3
    assert live_sim(cloudgpu_home) == []


def test_no_capacity_anywhere_is_one_line(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.a", 0.5)], capacity={"sim.a": 0})
    job = job_file(tmp_path, "name: nocap\nresources: {gpu: L4}\nrun: echo never\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 4
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "no capacity on any of 1 fitting offer" in errors[0]


RESUMABLE = """
name: resumable
resources: {gpu: L4, spot: auto}
checkpoint: /nvme/ckpt
run: |
  mkdir -p $CLOUDGPU_NVME/ckpt $CLOUDGPU_NVME/out
  step=$(cat $CLOUDGPU_NVME/ckpt/step 2>/dev/null || echo 0)
  echo "starting at step $step"
  while [ "$step" -lt 30 ]; do
    step=$((step + 1)); echo "$step" > $CLOUDGPU_NVME/ckpt/step; sleep 0.2
  done
  echo "done at step $step" | tee $CLOUDGPU_NVME/out/result.txt
outputs:
  - {src: /nvme/out, dst: ./results}
"""


def test_preemption_and_resume(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job_file(tmp_path, RESUMABLE)), "--yes"],
        env={**os.environ, "CLOUDGPU_HOME": str(cloudgpu_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Once the job has made (and checkpointed) progress on the spot instance, the
        # cloud announces an interruption 3 s ahead, as a spot market would.
        wait_for(lambda: job_state(cloudgpu_home) == "running", timeout=120, what="running")
        (spot,) = sim(cloudgpu_home).list_instances({})
        ckpt = Path(spot.extra["dir"]) / "nvme" / "ckpt" / "step"
        wait_for(lambda: ckpt.exists() and int(ckpt.read_text() or 0) >= 3, what="progress")
        sim(cloudgpu_home).preempt(spot.id, notice=3.0)
        out_b, err_b = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = out_b.decode(), err_b.decode()
    assert proc.returncode == 0, err
    starts = [int(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("starting at")]
    assert starts[0] == 0 and len(starts) == 2 and 3 <= starts[1] < 30, out
    assert "spot preemption notice" in err and "re-provisioning without" in err
    assert (tmp_path / "results" / "result.txt").read_text() == "done at step 30\n"
    rec = store(cloudgpu_home).jobs()[0]
    insts = store(cloudgpu_home).instances(rec.id)
    assert [(i.market, i.state) for i in insts] == [
        ("spot", "preempted"),
        ("on_demand", "terminated"),
    ]
    assert len(store(cloudgpu_home).spend(job_id=rec.id)) == 2  # the bill covers both
    res = cli_proc(["status", rec.id], cloudgpu_home)
    assert "preempted" in res.stdout and res.returncode == 0
    assert live_sim(cloudgpu_home) == []


# -- the client dies ---------------------------------------------------------------------


def launch_bg(job: Path, home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env={**os.environ, "CLOUDGPU_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def job_state(home: Path) -> str:
    jobs = store(home).jobs()
    return jobs[0].state if jobs else ""


def test_instance_deadline_without_client(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    job = job_file(
        tmp_path, "name: dl\nresources: {gpu: L4}\nrun: sleep 120\nlimits: {max_runtime: 3s}\n"
    )
    proc = launch_bg(job, cloudgpu_home)
    try:
        wait_for(lambda: job_state(cloudgpu_home) == "running", timeout=60, what="running")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (iid,) = live_sim(cloudgpu_home)
    # No client and no `down`: the instance stops itself at max_runtime + grace.
    wait_for(
        lambda: sim(cloudgpu_home).describe(iid).state.is_gone,
        timeout=60,
        what="instance-side deadline",
    )
    assert sim(cloudgpu_home).describe(iid).state == InstanceState.TERMINATED


def test_disk_full_on_nvme(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)], nvme_tmpfs_mb=2)
    d = tmp_path / "dataset"
    d.mkdir()
    (d / "blob").write_bytes(os.urandom(4_000_000))
    job = job_file(
        tmp_path,
        "name: full\nresources: {gpu: L4}\n"
        "data: [{src: ./dataset, dst: /nvme/data}]\nrun: echo never\n",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 5, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0]
    assert "never" not in out
    assert live_sim(cloudgpu_home) == []
    assert job_state(cloudgpu_home) == "failed"


def test_keep_then_ssh_and_exec_on_sim(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    job = job_file(tmp_path, "name: kept\nresources: {gpu: L4}\nrun: echo hi > $CLOUDGPU_NVME/hi\n")
    code, _, err = main_exit(["launch", str(job), "--yes", "--keep"])
    assert code == 0, err
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "kept" and len(live_sim(cloudgpu_home)) == 1
    # The system ssh checks the host key against the pin cloudgpu recorded.
    res = cli_proc(["ssh", rec.id, "--", "cat", "$CLOUDGPU_NVME/hi"], cloudgpu_home)
    assert res.returncode == 0 and res.stdout == "hi\n", res.stderr
    res = cli_proc(["exec", rec.id, "--", "sh", "-c", "echo $CLOUDGPU_NVME; exit 3"], cloudgpu_home)
    (inst,) = sim(cloudgpu_home).list_instances({})
    assert res.returncode == 3 and res.stdout == inst.nvme_mount + "\n"
    res = cli_proc(["down", "--all", "--yes"], cloudgpu_home, env={"CLOUDGPU_SIM": "1"})
    assert res.returncode == 0, res.stderr
    assert live_sim(cloudgpu_home) == []
    assert store(cloudgpu_home).job(rec.id).state == "stopped"
