"""Learning from the user's own runs, end to end on the sim cloud (real sshd instances on
127.0.0.1): a job reports its speed on stdout or in $CLOUDGPU_METRICS, `launch` records
it, and the next `plan` of that workload is calibrated from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.state import runs
from tests.lifecycle.helpers import job_file, main_exit, store
from tests.lifecycle.test_sim_e2e import configure, offer, sim

pytestmark = pytest.mark.slow

WORKLOAD = "workload: {kind: lora, model: llama-3.2-3b, tokens: 10M, seq_len: 1024}"


@pytest.fixture(autouse=True)
def sweep(cloudgpu_home: Path) -> Iterator[None]:
    yield
    p = sim(cloudgpu_home)
    for d in sorted((cloudgpu_home / "data" / "sim").glob("sim-*")):
        p.terminate(d.name)


def test_reported_speed_is_recorded_and_calibrates_the_next_plan(
    tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.l4", 0.8)])
    first = job_file(
        tmp_path,
        f"name: speed-line\nresources: {{gpu: L4}}\n{WORKLOAD}\n"
        "run: |\n  echo training\n  echo 'cloudgpu: tokens_per_s=1234.5 layout=DDP'\n",
        "first.yaml",
    )
    code, out, err = main_exit(["plan", str(first)])
    assert code == 0, err
    assert "calibrated" not in out  # nothing measured yet

    code, out, err = main_exit(["launch", str(first), "--yes"])
    assert code == 0, err
    assert "recorded 1,234 tokens/s (stdout)" in out + err
    (rec,) = runs.runs(store(cloudgpu_home))
    assert (rec.gpu, rec.gpu_count, rec.tokens_per_s, rec.layout) == ("L4", 1, 1234.5, "DDP")
    assert rec.workload["model"] == "llama-3.2-3b"

    code, out, err = main_exit(["plan", str(first)])
    assert code == 0, err
    assert "#1 speed calibrated from 1 run on L4" in out

    second = job_file(
        tmp_path,
        f"name: speed-file\nresources: {{gpu: L4}}\n{WORKLOAD}\n"
        'run: |\n  echo \'{"tokens_per_s": 2000}\' > "$CLOUDGPU_METRICS"\n',
        "second.yaml",
    )
    code, out, err = main_exit(["launch", str(second), "--yes"])
    assert code == 0, err
    assert "(file)" in out + err
    code, out, err = main_exit(["plan", str(second), "--json"])
    assert code == 0, err
    assert '"calibration": "calibrated from 2 runs on L4' in out


def test_a_failed_run_records_nothing(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, [offer("sim.l4", 0.8)])
    job = job_file(
        tmp_path,
        f"name: speed-fail\nresources: {{gpu: L4}}\n{WORKLOAD}\n"
        "run: |\n  echo 'cloudgpu: tokens_per_s=99'\n  exit 3\n",
    )
    code, _, _ = main_exit(["launch", str(job), "--yes"])
    assert code != 0
    assert runs.runs(store(cloudgpu_home)) == []
