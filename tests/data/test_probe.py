"""The probe on a real local disk (a LocalMachine workspace): measurements, the GPU part's
honest skip without torch or without a CUDA device, the verdict, and the store."""

from __future__ import annotations

import os
from pathlib import Path

from cloudgpu.data import probe
from cloudgpu.remote import LocalMachine
from cloudgpu.state import probes
from cloudgpu.state.store import Store


def test_quick_probe_measures_the_disk_and_skips_the_gpu_honestly(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "w", base_env={"PATH": os.environ["PATH"]})
    result = probe.run_probe(m, quick=True)
    d = result["disk"]
    assert d["seq_read_gbs"] > 0 and d["rand_4k_iops"] > 0 and d["small_files_per_s"] > 0
    assert result["seconds"] <= 30
    g = result["gpu"]
    # No GPU here: the probe says why instead of inventing figures.
    assert g["status"] == "skipped" and ("torch" in g["reason"] or "CUDA" in g["reason"])
    assert not Path(m.nvme_path, ".cloudgpu-probe").exists()
    assert "small files/s" in probe.summary(result)


def disk(seq_gbs: float, files: float) -> dict[str, object]:
    return {
        "disk": {
            "seq_read_gbs": seq_gbs,
            "rand_4k_iops": 1000,
            "small_files_per_s": files,
            "cpus": 8,
        }
    }


def test_verdicts() -> None:
    need = probe.need_of({"samples_per_s": 3000, "bytes_per_sample": "110KB"}, gpus=8)
    assert need.samples_per_s == 24000 and need.bytes_per_sample == 110e3
    slow_disk = probe.verdict(disk(1.0, 1e6), need)  # needs 2.64 GB/s
    assert slow_disk.bottleneck == "input" and "NVMe sequential read" in slow_disk.headline
    assert any("RAID0" in a for a in slow_disk.advice)
    small = probe.verdict(disk(10.0, 5000), need)
    assert small.bottleneck == "input" and any("shards" in a for a in small.advice)
    fine = probe.verdict(disk(10.0, 1e6), need)
    assert fine.bottleneck == "gpu" and "GPU-bound" in fine.headline
    cpu = probe.verdict(
        disk(10.0, 1e6),
        probe.need_of(
            {"samples_per_s": 3000, "bytes_per_sample": "110KB", "cpu_samples_per_s": 100}, 8
        ),
    )
    assert cpu.bottleneck == "input" and any("loader workers" in a for a in cpu.advice)
    assert probe.verdict(disk(1, 1), probe.Need()).bottleneck == "unknown"


def test_probes_are_kept_per_instance_type(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.db")
    gpu = {
        "status": "measured",
        "name": "NVIDIA H100",
        "bf16_tflops": 700.0,
        "hbm_gbs": 2900.0,
        "h2d_gbs": 50.0,
    }
    probes.record(store, "j1", "aws", "p5.48xlarge", "H100-SXM", 1.0, {**disk(9, 9), "gpu": gpu})
    probes.record(store, "j2", "aws", "p5.48xlarge", "H100-SXM", 2.0, disk(8, 8))
    latest = probes.latest_by_type(store)
    assert latest[("aws", "p5.48xlarge")].job_id == "j2"
    assert probes.measured_gpus(store)["H100-SXM"]["bf16_tflops"] == 700.0
    assert [p.job_id for p in probes.probes(store, "j1")] == ["j1"]


def test_the_plans_token_rate_stands_in_for_samples_per_s() -> None:
    """No samples/s in the workload: the planner's tokens/s for the machine, read as
    token ids from shards (no small-file limit), is what the input side must deliver."""
    w = {"kind": "train", "params": "8B", "tokens": "2B", "seq_len": 4096}
    assert probe.need_of(w, 8).samples_per_s == 0  # nothing to compare without the plan
    need = probe.need_of(w, 8, tokens_per_s=400_000)
    assert need.bytes_per_s == 400_000 * probe.BYTES_PER_TOKEN
    assert need.samples_per_s == 400_000 / 4096
    fast = probe.verdict(disk(2.0, 10), need)  # 2 GB/s against 1.6 MB/s: few files is fine
    assert fast.bottleneck == "gpu" and "tokens/s" in fast.headline
    slow = probe.verdict(disk(0.0008, 10), need)
    assert slow.bottleneck == "input" and "NVMe sequential read" in slow.headline
    # The workload's own numbers win over the estimate.
    own = probe.need_of({**w, "samples_per_s": 10, "bytes_per_sample": "1MB"}, 8, 400_000)
    assert own.samples_per_s == 80 and not own.source
