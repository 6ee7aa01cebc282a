"""What losing one node of a multi-node job costs: the lost node replaced alone (the
survivors kept) beside the whole group replaced, on the sim cloud, in one invocation.

A 3-node spot job stages a dataset to every node, runs a setup step, then a resumable
loop that checkpoints from rank 0. Once it runs, rank 2 gets a preemption notice. Per
run, from the real CLI's output (`python -m cloudgpu launch job.yaml --yes`):

* notice -> resumed: from the notice to the last node printing the step it resumed at;
* instances created after the notice, and bytes of data staged again after it;

"alone" is the default (Capabilities.replace_node); "whole group" is the same job with
sim's ``group_spares = 0`` (the placement takes no replacement), which falls back to a
new group. Runs are interleaved (alone, whole, alone, ...) and medians reported; the
sim boots in BOOT_S seconds (real clouds take minutes: the times here are the floor,
the bytes and instances are what a cloud bills). Results: bench/results/node_replacement.md.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cloudgpu_providers.sim import SimProvider

from cloudgpu.paths import default_paths
from cloudgpu.provider import ProviderContext

RUNS = 3
NODES = 3
BOOT_S = 1.0
DATA_FILES, DATA_FILE_BYTES = 8, 4_000_000
CONFIG = """
[launch]
deadline_grace = 1

[providers.local]
enabled = false

[providers.sim]
enabled = true
boot_delay = {boot}
{extra}

[[providers.sim.offers]]
instance_type = "sim.spot"
gpu = "L4"
gpu_count = 1
gpu_memory_gb = 24
vcpus = 4
memory_gb = 16
price_per_hour = 0.3
market = "spot"

[[providers.sim.offers]]
instance_type = "sim.od"
gpu = "L4"
gpu_count = 1
gpu_memory_gb = 24
vcpus = 4
memory_gb = 16
price_per_hour = 0.9
"""
JOB = """
name: bench-replace
num_nodes: {nodes}
resources: {{gpu: L4, spot: auto}}
checkpoint: /nvme/ckpt
data: [{{src: ./data, dst: /nvme/data}}]
setup: sleep 1
run: |
  mkdir -p $CLOUDGPU_NVME/ckpt && cd $CLOUDGPU_NVME/ckpt
  step=$(cat step 2>/dev/null || echo 0)
  echo "resumed at $step"
  while [ "$step" -lt 40 ]; do
    step=$((step + 1))
    if [ "$NODE_RANK" = 0 ]; then echo "$step" > step.new && mv step.new step; fi
    sleep 0.2
  done
"""
SENT = re.compile(r"/nvme/data: \d+ file\(s\) sent \(([\d.]+) (B|KB|MB|GB)\)")
UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


@dataclass
class Run:
    resumed_s: float  # notice -> every node resumed
    created: int  # instances created after the notice
    restaged: float  # bytes of data staged after the notice


def _lines(stream: object, into: list[tuple[float, str]]) -> threading.Thread:
    def read() -> None:
        for raw in stream:  # type: ignore[attr-defined]
            into.append((time.perf_counter(), raw.decode(errors="replace")))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def _once(root: Path, whole: bool) -> Run:
    home = root / ("whole" if whole else "alone") / str(time.monotonic_ns())
    (home / "config").mkdir(parents=True)
    extra = "group_spares = 0" if whole else ""
    (home / "config" / "config.toml").write_text(CONFIG.format(boot=BOOT_S, extra=extra))
    job = root / "job.yaml"
    env = {**os.environ, "CLOUDGPU_HOME": str(home)}
    env.pop("CLOUDGPU_SIM", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out: list[tuple[float, str]] = []
    err: list[tuple[float, str]] = []
    readers = [_lines(proc.stdout, out), _lines(proc.stderr, err)]
    sim = SimProvider(
        ProviderContext({"enabled": True}, default_paths({"CLOUDGPU_HOME": str(home)}), {})
    )
    try:
        while sum("resumed at" in ln for _, ln in out) < NODES:  # all running
            if proc.poll() is not None:
                raise RuntimeError("launch ended before the run: " + "".join(ln for _, ln in err))
            time.sleep(0.05)
        time.sleep(1.0)
        victim = sorted(sim.list_instances({}), key=lambda i: i.launched_at or 0)[-1]
        before = len(list((home / "data" / "sim").glob("sim-*")))
        notice_at = time.perf_counter()
        sim.preempt(victim.id, notice=2.0)
        if proc.wait(timeout=300) != 0:
            raise RuntimeError("launch failed: " + "".join(ln for _, ln in err))
    finally:
        if proc.poll() is None:
            proc.kill()
        for t in readers:
            t.join(10)
    resumed = [t for t, ln in out if "resumed at" in ln and t > notice_at]
    sent = [m for t, ln in err if t > notice_at for m in SENT.finditer(ln)]
    created = len(list((home / "data" / "sim").glob("sim-*"))) - before
    return Run(
        resumed_s=max(resumed[:NODES]) - notice_at,
        created=created,
        restaged=sum(float(n) * UNITS[u] for n, u in (m.groups() for m in sent)),
    )


def run(results_dir: Path) -> str:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cloudgpu-bench-replace-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        for i in range(DATA_FILES):
            (root / "data" / f"shard-{i}.bin").write_bytes(os.urandom(DATA_FILE_BYTES))
        (root / "job.yaml").write_text(JOB.format(nodes=NODES))
        runs: dict[bool, list[Run]] = {False: [], True: []}
        for _ in range(RUNS):
            for whole in (False, True):
                runs[whole].append(_once(root, whole))
    med = {w: statistics.median(r.resumed_s for r in rs) for w, rs in runs.items()}
    lines = [
        "# Losing one node of a 3-node job on sim: replaced alone vs the whole group",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with "
        f"`python -m bench node_replacement`; {RUNS} interleaved runs each; sim boot "
        f"{BOOT_S:g} s; {DATA_FILES} x {DATA_FILE_BYTES / 1e6:g} MB of data per node; a "
        f"1 s setup. Load average at the start: {load:.1f} on {os.cpu_count()} CPUs.",
        "",
        "| replaced | notice -> resumed (median s) | min | max | instances created | "
        "data staged again (MB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for whole, label in ((False, "the lost node alone"), (True, "the whole group")):
        xs = [r.resumed_s for r in runs[whole]]
        made = statistics.median(r.created for r in runs[whole])
        mb = statistics.median(r.restaged for r in runs[whole]) / 1e6
        lines.append(
            f"| {label} | {med[whole]:.2f} | {min(xs):.2f} | {max(xs):.2f} | {made:g} | {mb:.0f} |"
        )
    (results_dir / "node_replacement.md").write_text("\n".join(lines) + "\n")
    return (
        f"notice -> resumed: alone {med[False]:.2f} s, whole group {med[True]:.2f} s "
        f"(x{med[True] / med[False]:.2f})"
    )
