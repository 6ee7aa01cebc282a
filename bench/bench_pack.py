"""`pack: true` against the plain stream: 20,000 files of 8 KB onto a sim instance.

One stream (what a local tree gets by default: one agent receives and writes every
file) against the tree split into PACK_STREAMS shards, each sent as its own stream and
unpacked by its own agent on the instance at once. Same instance (a real sshd on
loopback, /nvme on tmpfs), same connection, interleaved, medians of REPS runs, each
from an empty destination. Both ends share this machine's CPUs, so the parallel
unpack can gain only what the cores the sender leaves free allow: the ratio on a
many-core instance fed over a network is the one that matters, and it is not this.
Environment: BENCH_PACK_REPS (default 5), BENCH_PACK_FILES (default 20,000).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.bench_transfer import SMALL_SIZE, _start
from cloudgpu.lifecycle.stage import PACK_STREAMS
from cloudgpu.paths import default_paths
from cloudgpu.remote import SSHMachine, connect


def _tree(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"shard{i % 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"sample{i:05d}.bin").write_bytes(os.urandom(SMALL_SIZE))


def run(results_dir: Path) -> str:
    reps = int(os.environ.get("BENCH_PACK_REPS", "5"))
    files = int(os.environ.get("BENCH_PACK_FILES", "20000"))
    res: dict[str, list[float]] = {"one stream": [], f"pack: true ({PACK_STREAMS} shards)": []}
    with tempfile.TemporaryDirectory(prefix="cgpu-bench-pack-") as tmp:
        root = Path(tmp)
        paths = default_paths({"CLOUDGPU_HOME": str(root / "home")}).ensure()
        _tree(root / "small", files)
        provider, inst = _start(paths)
        try:
            m = connect(inst, known_hosts=paths.data_dir / "known_hosts")
            assert isinstance(m, SSHMachine)
            try:
                for _ in range(reps):
                    for name, streams in zip(res, (1, PACK_STREAMS), strict=True):
                        m.run("rm -rf /nvme/b && mkdir -p /nvme/b")
                        t0 = time.perf_counter()
                        m.put_dir(root / "small", "/nvme/b/s", streams=streams)
                        res[name].append(time.perf_counter() - t0)
            finally:
                m.close()
        finally:
            provider.terminate(inst.id)
    med = {k: statistics.median(v) for k, v in res.items()}
    one, packed = med.values()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "# pack: true vs one stream (local small-file tree onto a sim instance)",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs shared by sender and "
        f"instance, load average {load}; {files:,} files of {SMALL_SIZE // 1024} KB, medians "
        f"of {reps}; written by `python -m bench pack`.",
        "",
        "| contender | median s | files/s | runs (s) |",
        "|---|---:|---:|---|",
    ]
    for k, v in res.items():
        runs = " ".join(f"{x:.2f}" for x in v)
        lines.append(f"| {k} | {med[k]:.2f} | {files / med[k]:,.0f} | {runs} |")
    lines += ["", f"pack: true takes {packed / one:.2f}x the time of one stream here."]
    text = "\n".join(lines) + "\n"
    (results_dir / "pack.md").write_text(text)
    return text
