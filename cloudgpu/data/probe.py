"""Will the GPU starve? Run the instance-side probe, compare it with what the workload
consumes, say plainly which side is the bottleneck and what to change.

The probe (cloudgpu/remote/prober.py) measures NVMe sequential read, 4 KiB random-read
IOPS and the small-file open+read rate, and, where torch sees a GPU, BF16 matmul TFLOPS,
HBM and host-to-device bandwidth. What the workload needs comes from its own numbers
(``workload.samples_per_s`` per GPU and ``bytes_per_sample``, optionally
``cpu_samples_per_s``: REFERENCE.md section 5's starvation model). Measurements are kept
in the state store per (provider, instance type) by cloudgpu.state.probes.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudgpu.data.probeview import summary
from cloudgpu.errors import RemoteError
from cloudgpu.lifecycle.output import human_bytes
from cloudgpu.planner.workload import parse_bytes  # the planner owns the workload's units
from cloudgpu.remote import Machine
from cloudgpu.remote import prober as script

__all__ = ["Need", "Verdict", "need_of", "run_probe", "summary", "verdict"]
PROBER_SOURCE = Path(script.__file__).read_text(encoding="utf-8")
SMALL_SAMPLE_BYTES = 1 << 20  # samples below this are taken to be one file each
PROBE_TIMEOUT_S = 120


@dataclass
class Need:
    """What the job's GPUs consume, from its workload block (0: not stated)."""

    samples_per_s: float = 0.0  # all GPUs together
    bytes_per_sample: float = 0.0
    cpu_samples_per_s: float = 0.0  # decode rate of one vCPU
    source: str = ""  # where the rate comes from, when not the workload's own numbers

    @property
    def bytes_per_s(self) -> float:
        return self.samples_per_s * self.bytes_per_sample


@dataclass
class Verdict:
    bottleneck: str  # "input" | "gpu" | "unknown"
    headline: str
    advice: list[str] = field(default_factory=list)


# Pre-tokenized training data is read as token ids: 4 bytes each (int32; uint16 shards
# need half), one sequence per sample, read from shards rather than one file each.
BYTES_PER_TOKEN = 4
DEFAULT_SEQ_LEN = 2048


def need_of(
    workload: Mapping[str, Any] | None, gpus: int, tokens_per_s: float | None = None
) -> Need:
    """The consumption the workload states (sizes like "110KB" as the planner reads
    them); without samples_per_s, the planner's estimated ``tokens_per_s`` for the
    machine read as token ids (BYTES_PER_TOKEN each, ``seq_len`` per sample)."""
    w = workload or {}
    try:
        per_gpu = float(w.get("samples_per_s") or 0)
        size = float(parse_bytes(w.get("bytes_per_sample", 0), "bytes_per_sample"))
        cpu = float(w.get("cpu_samples_per_s") or 0)
        seq = int(w.get("seq_len") or DEFAULT_SEQ_LEN)
    except (TypeError, ValueError):
        return Need()
    if per_gpu <= 0 and tokens_per_s and tokens_per_s > 0 and seq > 0:
        return Need(
            tokens_per_s / seq,
            float(seq * BYTES_PER_TOKEN),
            cpu,
            source=f"the plan's {tokens_per_s:,.0f} tokens/s as {BYTES_PER_TOKEN}-byte token ids",
        )
    return Need(per_gpu * max(gpus, 1), size, cpu)


def run_probe(machine: Machine, *, quick: bool = False, gpu: bool = True) -> dict[str, Any]:
    """Run the probe on ``machine``'s NVMe; its JSON result."""
    flags = (" quick" if quick else "") + ("" if gpu else " nogpu")
    cmd = (
        "P=python3; [ -x /usr/bin/python3 ] && P=/usr/bin/python3; command -v python3 >/dev/null"
        f' && P=python3; exec "$P" -c {shlex.quote(PROBER_SOURCE)} probe '
        f"{shlex.quote(machine.nvme_path)}{flags}"
    )
    out: list[bytes] = []
    err: list[bytes] = []
    rc = machine.run(cmd, on_stdout=out.append, on_stderr=err.append, timeout=PROBE_TIMEOUT_S)
    text = b"".join(out).decode(errors="replace").strip().splitlines()
    if rc != 0 or not text:
        why = (b"".join(err).decode(errors="replace").strip().splitlines() or [f"exit {rc}"])[-1]
        raise RemoteError(f"data probe failed on the instance: {why[:300]}")
    try:
        result: dict[str, Any] = json.loads(text[-1])
    except ValueError:
        raise RemoteError("data probe: unreadable result from the instance") from None
    if not isinstance(result.get("disk"), dict):
        raise RemoteError("data probe: unexpected result from the instance")
    return result


def verdict(result: Mapping[str, Any], need: Need, vcpus: float | None = None) -> Verdict:
    d = result["disk"]
    seq = float(d["seq_read_gbs"]) * 1e9
    files = float(d["small_files_per_s"])
    cpus = float(vcpus or d.get("cpus") or 1)
    if need.samples_per_s <= 0 or need.bytes_per_sample <= 0:
        return Verdict(
            "unknown",
            "no workload.samples_per_s / bytes_per_sample: cannot say whether the GPUs starve",
            ["state them in the job's workload: block to get a verdict"],
        )
    supplies = {"NVMe sequential read": seq / need.bytes_per_s}
    if need.bytes_per_sample < SMALL_SAMPLE_BYTES and not need.source:  # tokens: shards
        supplies["small-file reads"] = files / need.samples_per_s
    if need.cpu_samples_per_s > 0:
        supplies["CPU decode"] = cpus * need.cpu_samples_per_s / need.samples_per_s
    worst = min(supplies, key=lambda k: supplies[k])
    ratio = supplies[worst]
    wanted = f"{need.samples_per_s:,.0f} samples/s x {human_bytes(need.bytes_per_sample)}"
    if need.source:
        wanted += f", from {need.source}"
    if ratio >= 1.0:
        return Verdict(
            "gpu",
            f"GPU-bound: the input side delivers {ratio:.1f}x what the GPUs consume "
            f"({wanted} = {human_bytes(need.bytes_per_s)}/s; tightest: {worst})",
        )
    advice = {
        "NVMe sequential read": "use more NVMe devices in RAID0 (an instance with more local "
        "disks), or keep the decoded dataset in RAM",
        "small-file reads": "pack small files into large shards (tar/WebDataset; `pack: true` "
        "for local trees) and read them sequentially",
        "CPU decode": "more data-loader workers, an instance with more vCPUs, or GPU decoding",
    }
    return Verdict(
        "input",
        f"input-bound: {worst} covers only {ratio:.0%} of what the GPUs consume ({wanted}); "
        f"expect the GPUs to wait about {1 - ratio:.0%} of the time",
        [advice[k] for k, v in sorted(supplies.items(), key=lambda kv: kv[1]) if v < 1.0],
    )
