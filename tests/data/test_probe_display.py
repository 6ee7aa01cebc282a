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
