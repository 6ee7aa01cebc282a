"""`cloudgpu data probe` on a sim instance: how long it takes, and its disk figure
against `dd` reading the same kind of file on the same disk.

The probe runs exactly as `data probe JOB` runs it (cloudgpu.data.probe.run_probe over
the instance's SSH connection, the stdlib prober on the instance's /nvme, here a
directory on this machine's disk), full and quick (the launch line), each timed from
the client including the SSH round trip. Baseline in the same run: ``dd
iflag=direct bs=8M`` reading a 1 GiB file written there (flushed and dropped from the
cache first, as the probe does), i.e. what a standard tool says the disk's sequential
read rate is. Interleaved, medians of REPS. The sim instance has no GPU and no torch:
the GPU part is skipped (its time is the import attempt), so GPU figures are not here.
Target (issue 15): the probe completes in <= 30 s. Environment: BENCH_PROBE_REPS (3).
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.bench_transfer import _start
from cloudgpu.data.probe import run_probe
from cloudgpu.paths import default_paths
from cloudgpu.remote import SSHMachine, connect

DD_MB = 1024


def _dd(m: SSHMachine) -> float:
    """GB/s that dd reports reading a fresh 1 GiB file with O_DIRECT (buffered where the
    filesystem refuses O_DIRECT, after dropping the file from the cache)."""
    f = f"{m.nvme_path}/.bench-dd"
    prep = (
        f"dd if=/dev/urandom of={f} bs=8M count={DD_MB // 8} conv=fsync status=none && "
        f'python3 -c \'import os; fd=os.open("{f}", os.O_RDONLY); '
        f"os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)'"
    )
    read = (
        f"(dd if={f} of=/dev/null bs=8M iflag=direct 2>&1 || "
        f"dd if={f} of=/dev/null bs=8M 2>&1) | tail -1; rm -f {f}"
    )
    out: list[bytes] = []
    if m.run(prep) != 0 or m.run(read, on_stdout=out.append) != 0:
        raise RuntimeError("dd failed on the sim instance")
    line = b"".join(out).decode()
    got = re.search(r"([\d.]+) s, ", line)
    if not got:
        raise RuntimeError(f"unexpected dd output: {line!r}")
    return DD_MB * (1 << 20) / float(got.group(1)) / 1e9


def _timed_probe(m: SSHMachine, quick: bool) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    result = run_probe(m, quick=quick)
    return time.perf_counter() - t0, result


def run(results_dir: Path) -> str:
    reps = int(os.environ.get("BENCH_PROBE_REPS", "3"))
    wall: dict[str, list[float]] = {"full": [], "quick": []}
    seq: dict[str, list[float]] = {"full": [], "quick": [], "dd": []}
    last: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cgpu-bench-probe-", dir="/var/tmp") as tmp:
        paths = default_paths({"CLOUDGPU_HOME": str(Path(tmp) / "home")}).ensure()
        provider, inst = _start(paths, nvme_tmpfs_mb=0)  # /nvme on this machine's disk
        try:
            m = connect(inst, known_hosts=paths.data_dir / "known_hosts")
            assert isinstance(m, SSHMachine)
            try:
                for _ in range(reps):
                    for kind in ("full", "quick"):
                        s, last[kind] = _timed_probe(m, kind == "quick")
                        wall[kind].append(s)
                        seq[kind].append(last[kind]["disk"]["seq_read_gbs"])
                    seq["dd"].append(_dd(m))
            finally:
                m.close()
        finally:
            provider.terminate(inst.id)
    return _report(results_dir, reps, wall, seq, last)


def _report(
    results_dir: Path,
    reps: int,
    wall: dict[str, list[float]],
    seq: dict[str, list[float]],
    last: dict[str, Any],
) -> str:
    med = {k: statistics.median(v) for k, v in seq.items()}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    d = last["full"]["disk"]
    lines = [
        "# `data probe` on a sim instance: duration, and its sequential read vs dd",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load average {load}; "
        f"/nvme on this machine's disk; medians of {reps}; written by `python -m bench probe`.",
        "",
        "| probe | wall s (client, incl. SSH) | runs (s) | seq read GB/s | vs dd |",
        "|---|---:|---|---:|---:|",
    ]
    for kind in ("full", "quick"):
        w = statistics.median(wall[kind])
        runs = " ".join(f"{x:.1f}" for x in wall[kind])
        lines.append(
            f"| {kind} | {w:.1f} | {runs} | {med[kind]:.2f} | {med[kind] / med['dd']:.2f}x |"
        )
    lines += [
        f"| `dd iflag=direct bs=8M`, 1 GiB (baseline) | | | {med['dd']:.2f} | 1.00x |",
        "",
        f"Last full probe: {d['rand_4k_iops']:,} IOPS 4 KiB random, "
        f"{d['small_files_per_s']:,} small files/s, O_DIRECT {d['direct_io']}; "
        f"GPU: {last['full']['gpu'].get('reason', last['full']['gpu'].get('status'))}.",
        f"Target: <= 30 s; full probe median {statistics.median(wall['full']):.1f} s.",
    ]
    text = "\n".join(lines) + "\n"
    (results_dir / "probe.md").write_text(text)
    return text
