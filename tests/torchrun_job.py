"""The real-torchrun job every multi-node suite launches: a gloo all_reduce whose sum
rank 0 writes to its outputs, and the job file that runs it on ``num_nodes`` machines
(the sim cloud, the fake kubelet's pods, Slurm's nodes).

Why a suite may not run it is said here once: torch is the test extra, and sim
instances and the fake kubelet's pods get a /tmp of their own, so a virtualenv under
/tmp is not there (Slurm's steps run on this host: only the first reason applies)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tests.lifecycle.helpers import job_file

VENV_BIN = str(Path(sys.executable).parent)
# Why no torchrun can run here at all, or "".
NO_TORCHRUN = (
    "torch (the test extra) is not installed"
    if shutil.which("torchrun", path=VENV_BIN) is None
    else ""
)
# Why torchrun cannot run inside a sim instance or a pod, or "".
NO_TORCH = NO_TORCHRUN or (
    "this virtualenv lies under /tmp, which sim instances replace with their own"
    if Path(VENV_BIN).resolve().is_relative_to("/tmp")
    else ""
)
HAS_TORCH = not NO_TORCH

ALLREDUCE = """
import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank}/{world} node {os.environ['NODE_RANK']} sum {t.item():g}", flush=True)
if rank == 0:
    out = os.path.join(os.environ["CLOUDGPU_NVME"], "out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"world": world, "sum": t.item(), "nodes": os.environ["CLOUDGPU_NODE_IPS"]}, f)
dist.destroy_process_group()
"""


def torch_job(
    tmp_path: Path,
    nodes: int | str,
    run: str | None = None,
    resources: str = "{gpu: L4}",
    name: str = "ddp",
) -> Path:
    """The job file (with ``./code/allreduce.py`` beside it): ``run`` (by default
    torchrun of the all_reduce) on ``nodes`` machines, rank 0's /nvme/out collected into
    ``./results``."""
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "allreduce.py").write_text(ALLREDUCE)
    run = run or "$CLOUDGPU_TORCHRUN $CLOUDGPU_NVME/code/allreduce.py"
    return job_file(
        tmp_path,
        f"""
name: {name}
num_nodes: {json.dumps(nodes)}
resources: {resources}
data:
  - {{src: ./code, dst: /nvme/code}}
env:
  PATH: {VENV_BIN}:/usr/local/bin:/usr/bin:/bin
  GLOO_SOCKET_IFNAME: lo
run: |
  {run}
outputs:
  - {{src: /nvme/out, dst: ./results}}
limits: {{max_runtime: 10m}}
""",
    )
