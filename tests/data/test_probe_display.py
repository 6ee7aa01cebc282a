"""Probe results where users look: `status JOB` and `plan` (text and JSON)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from cloudgpu.lifecycle.launch import create_job
from cloudgpu.spec import load_job
from cloudgpu.state import probes
from tests.lifecycle.helpers import job_file, main_exit, store
from tests.lifecycle.test_sim_e2e import configure, offer

RESULT = {
    "disk": {"seq_read_gbs": 2.5, "rand_4k_iops": 250000, "small_files_per_s": 9000, "cpus": 8},
    "gpu": {"status": "skipped", "reason": "no torch"},
    "seconds": 4.1,
}


def test_status_and_plan_show_the_newest_probe_of_the_instance_type(
    cloudgpu_home: Path, tmp_path: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.l4", 1.0), offer("sim.big", 2.0)])
    path = job_file(tmp_path, "name: shown\nresources: {providers: [sim]}\nrun: 'true'\n")
    s = store(cloudgpu_home)
    create_job(s, load_job(path), "shown-000001", str(tmp_path / "log"))
    old = {**RESULT, "disk": {**RESULT["disk"], "seq_read_gbs": 0.5}}
    probes.record(s, "shown-000001", "sim", "sim.l4", "L4", time.time() - 99, old)
    probes.record(s, "shown-000001", "sim", "sim.l4", "L4", time.time(), RESULT)
    s.close()

    code, out, err = main_exit(["status", "shown-000001"])
    assert code == 0, err
    assert "data probe (sim.l4): NVMe 2.50 GB/s sequential read" in out
    code, out, err = main_exit(["status", "shown-000001", "--json"])
    assert json.loads(out)[0]["probes"][-1]["result"]["disk"]["seq_read_gbs"] == 2.5

    code, out, err = main_exit(["plan", str(path)])
    assert code == 0, err
    assert "Measured on your own instances" in out
    assert "sim sim.l4: NVMe 2.50 GB/s sequential read, 250,000 IOPS" in out
    assert "sim.big:" not in out.split("Measured on")[1]  # never measured: nothing invented
    code, out, err = main_exit(["plan", str(path), "--json"])
    rows = {r["instance_type"]: r for r in json.loads(out)}
    assert "NVMe 2.50 GB/s" in rows["sim.l4"]["measured"] and "measured" not in rows["sim.big"]


def test_offers_and_gpus_show_measured_columns_once_measured(
    cloudgpu_home: Path, tmp_path: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.l4", 1.0), offer("sim.big", 2.0)])
    code, before, err = main_exit(["offers", "--provider", "sim"])
    assert code == 0, err
    assert "MEAS" not in before  # no measurement yet: no column
    s = store(cloudgpu_home)
    gpu = {"status": "measured", "name": "L4", "bf16_tflops": 97.5, "hbm_gbs": 241.0, "h2d_gbs": 11}
    probes.record(s, "j-1", "sim", "sim.l4", "L4", time.time(), {**RESULT, "gpu": gpu})
    s.close()
    code, out, err = main_exit(["offers", "--provider", "sim", "--json"])
    rows = {r["instance_type"]: r for r in json.loads(out)}
    assert rows["sim.l4"]["measured_nvme_gbs"] == 2.5 and rows["sim.l4"]["measured_bf16_tflops"]
    assert rows["sim.big"]["measured_nvme_gbs"] is None  # not measured: never made up
    code, out, err = main_exit(["offers", "--provider", "sim"])
    assert "NVME_GB/S_MEAS" in out and "BF16_TF_MEAS" in out
    code, out, err = main_exit(["gpus", "L4", "H100", "--json"])
    assert code == 0, err
    specs = {r["name"]: r for r in json.loads(out)}
    assert specs["L4"]["measured_bf16_tflops"] == 97.5 and specs["L4"]["bf16_tflops"] > 97.5
    assert specs["H100-SXM"]["measured_bf16_tflops"] is None
    code, out, err = main_exit(["gpus", "L4"])
    assert "BF16_MEAS" in out and "98" in out
