"""Data staging speed: cloudgpu's sync against OpenSSH baselines, side by side.

Against one sim instance (a real sshd on loopback), in the same invocation, interleaved
so background load hits every contender alike, medians of REPS runs:

1. 20,000 files of 8 KB (random bytes): cloudgpu put_dir vs ``tar c | ssh tar x`` and
   ``rsync -a`` over ssh.            Targets: <= 1.2 x tar|ssh, faster than rsync.
2. One 512 MB file: put_file vs ``cat | ssh 'cat > f'``.   Target: >= 85 % throughput.
3. No-op re-sync of the 20,000 files vs rsync's no-op.     Target: <= 1.5 x rsync.

cloudgpu reuses its connection across operations, as the lifecycle does; the baselines
open a new ssh connection each time, as a user typing them would. The "incl. connect"
rows add a full connect + close to cloudgpu's time for a like-for-like view. The
instance's /nvme is a tmpfs (``nvme_tmpfs_mb``) so that all contenders write to fast
storage, as on real NVMe, rather than to this VM's throttled virtual disk.
Environment: BENCH_TRANSFER_REPS (default 5), BENCH_TRANSFER_BIG_MB (default 512).
"""

from __future__ import annotations

import os
import platform
import shlex
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from cloudgpu_providers.sim import SimProvider

from cloudgpu.paths import Paths, default_paths
from cloudgpu.provider import TAG_JOB, CreateRequest, Instance, InstanceState, ProviderContext
from cloudgpu.remote import SSHMachine, connect

SMALL_FILES = 20_000
SMALL_SIZE = 8 * 1024


def make_small_tree(root: Path) -> None:
    for i in range(SMALL_FILES):
        d = root / f"shard{i % 100:03d}"
        if i < 100:
            d.mkdir(parents=True)
        (d / f"sample{i:05d}.bin").write_bytes(os.urandom(SMALL_SIZE))


def make_big_file(path: Path, mb: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))


class Target:
    """The sim instance as the baselines' ssh command line sees it."""

    def __init__(self, inst: Instance, known_hosts: Path) -> None:
        assert inst.ssh is not None and inst.ssh.key_file
        self.ssh = shlex.join(
            ["ssh", "-F", "/dev/null", "-p", str(inst.ssh.port), "-i", inst.ssh.key_file,
             "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"UserKnownHostsFile={known_hosts}", "-o", "LogLevel=ERROR"]
        )  # fmt: skip
        self.host = f"{inst.ssh.user}@{inst.ssh.host}"

    def sh(self, command: str) -> None:
        subprocess.run(["bash", "-c", command], check=True, stdin=subprocess.DEVNULL)

    def remote(self, command: str) -> str:
        return f"{self.ssh} {self.host} {shlex.quote(command)}"


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(
    reps: int,
    m: SSHMachine,
    mp: SSHMachine,
    t: Target,
    small: Path,
    big: Path,
    reconnect: Callable[[], SSHMachine],
) -> dict[str, list[float]]:
    """Interleaved rounds; each contender starts from an empty destination."""
    res: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        res.setdefault(name, []).append(seconds)

    def clean() -> None:
        m.run("rm -rf /nvme/b && mkdir -p /nvme/b")

    def put_fresh() -> None:
        c = reconnect()
        c.put_dir(small, "/nvme/b/small")
        c.close()

    q_big = shlex.quote(str(big))
    tar = f"tar cf - -C {small} . | " + t.remote(
        "mkdir -p /nvme/b/small && tar xf - -C /nvme/b/small"
    )
    rsync = f"rsync -a -e {shlex.quote(t.ssh)} {small}/ {t.host}:/nvme/b/small/"
    cat = f"cat {q_big} | " + t.remote("cat > /nvme/b/big.bin")
    cat_gcm = cat.replace(" ssh ", " ssh -c aes128-gcm@openssh.com ", 1)
    small_cases: list[tuple[str, Callable[[], object]]] = [
        ("small: tar c | ssh tar x", lambda: t.sh(tar)),
        ("small: rsync -a", lambda: t.sh(rsync)),
        ("small: cloudgpu put_dir", lambda: m.put_dir(small, "/nvme/b/small")),
        ("small: cloudgpu put_dir incl. connect", put_fresh),
        ("small: cloudgpu put_dir (paramiko only)", lambda: mp.put_dir(small, "/nvme/b/small")),
    ]
    big_cases: list[tuple[str, Callable[[], object]]] = [
        ("big: cat | ssh 'cat > f'", lambda: t.sh(cat)),
        ("big: cat | ssh -c aes128-gcm 'cat > f'", lambda: t.sh(cat_gcm)),
        ("big: cloudgpu put_file", lambda: m.put_file(big, "/nvme/b/big.bin")),
        ("big: cloudgpu put_file (paramiko only)", lambda: mp.put_file(big, "/nvme/b/big.bin")),
    ]
    for _ in range(reps):
        for name, fn in small_cases + big_cases:
            clean()
            add(name, timed(fn))
        clean()
        m.put_dir(small, "/nvme/b/small")
        for name, fn in [
            ("noop: rsync -a", small_cases[1][1]),
            ("noop: cloudgpu put_dir", small_cases[2][1]),
            ("noop: cloudgpu put_dir incl. connect", put_fresh),
        ]:
            add(name, timed(fn))
    clean()
    return res


def report(res: dict[str, list[float]], reps: int, big_mb: int, elapsed: float) -> tuple[str, str]:
    med = {k: statistics.median(v) for k, v in res.items()}
    lines = [
        "# Transfer benchmark: cloudgpu sync vs OpenSSH baselines",
        "",
        f"Run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}; "
        f"target: a sim instance (OpenSSH sshd on 127.0.0.1), /nvme on tmpfs. "
        f"Medians of {reps} interleaved runs; total {elapsed:.0f} s. "
        "Command: `python -m bench transfer`.",
        "",
        "cloudgpu moves bulk bytes through the system ssh binary (after paramiko verified "
        "the host key), asking for aes128-gcm (AES-NI); the baselines run plain `ssh` with "
        "OpenSSH's default cipher choice, as a user would. The paramiko-only rows show the "
        "fallback used when no ssh binary is installed.",
        "",
        "| case | median s | runs (s) |",
        "|---|---:|---|",
    ]
    for k, v in res.items():
        lines.append(f"| {_cell(k)} | {med[k]:.2f} | {' '.join(f'{x:.2f}' for x in v)} |")
    small, tar, rsync = "small: cloudgpu put_dir", "small: tar c | ssh tar x", "small: rsync -a"
    noop, rnoop = "noop: cloudgpu put_dir", "noop: rsync -a"
    conn = " incl. connect"
    big = med["big: cat | ssh 'cat > f'"] / med["big: cloudgpu put_file"]
    big_same = med["big: cat | ssh -c aes128-gcm 'cat > f'"] / med["big: cloudgpu put_file"]
    checks = [
        ("20k x 8 KB vs tar|ssh (target <= 1.20)", med[small] / med[tar], 1.2, "le"),
        ("  same, incl. connect", med[small + conn] / med[tar], 1.2, "le"),
        ("20k x 8 KB vs rsync -a (target < 1.00)", med[small] / med[rsync], 1.0, "lt"),
        ("  same, incl. connect", med[small + conn] / med[rsync], 1.0, "lt"),
        (f"{big_mb} MB throughput vs cat|ssh (target >= 0.85)", big, 0.85, "ge"),
        ("  same, baseline on cloudgpu's cipher", big_same, 0.85, "ge"),
        ("no-op re-sync vs rsync no-op (target <= 1.50)", med[noop] / med[rnoop], 1.5, "le"),
        ("  same, incl. connect", med[noop + conn] / med[rnoop], 1.5, "le"),
    ]
    lines += ["", "| ratio | value | met |", "|---|---:|---|"]
    summary = []
    for name, value, limit, op in checks:
        ok = {"le": value <= limit, "lt": value < limit, "ge": value >= limit}[op]
        lines.append(f"| {_cell(name)} | {value:.2f} | {'yes' if ok else 'NO'} |")
        summary.append(f"   {name}: {value:.2f} {'ok' if ok else 'MISSED'}")
    return "\n".join(lines) + "\n", "\n".join(summary)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _start(paths: Paths, nvme_tmpfs_mb: int = 4096) -> tuple[SimProvider, Instance]:
    """A sim instance; ``nvme_tmpfs_mb`` 0 puts its /nvme on this machine's disk."""
    config = {"enabled": True, "nvme_tmpfs_mb": nvme_tmpfs_mb}
    provider = SimProvider(ProviderContext(config=config, paths=paths, env={}))
    offer = next(o for o in provider.offers() if o.market == "on_demand")
    req = CreateRequest(
        offer=offer,
        name="bench-transfer",
        tags={TAG_JOB: "bench-transfer"},
        deadline=time.time() + 1800,
    )
    inst = provider.create(req)
    deadline = time.monotonic() + 60
    while (
        inst := provider.describe(inst.id)
    ).state == InstanceState.PENDING and time.monotonic() < deadline:
        time.sleep(0.05)
    return provider, inst


def run(results_dir: Path) -> str:
    reps = int(os.environ.get("BENCH_TRANSFER_REPS", "5"))
    big_mb = int(os.environ.get("BENCH_TRANSFER_BIG_MB", "512"))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cgpu-bench-transfer-") as tmp:
        root = Path(tmp)
        paths = default_paths({"CLOUDGPU_HOME": str(root / "home")}).ensure()
        make_small_tree(root / "small")
        make_big_file(root / "big.bin", big_mb)
        provider, inst = _start(paths)
        kh = paths.data_dir / "known_hosts"
        try:
            m = connect(inst, known_hosts=kh)
            mp = connect(inst, known_hosts=kh, use_openssh=False)
            assert isinstance(m, SSHMachine) and isinstance(mp, SSHMachine)

            def reconnect() -> SSHMachine:
                c = connect(inst, known_hosts=kh)
                assert isinstance(c, SSHMachine)
                return c

            try:
                res = measure(
                    reps, m, mp, Target(inst, kh), root / "small", root / "big.bin", reconnect
                )
            finally:
                m.close()
                mp.close()
        finally:
            provider.terminate(inst.id)
    text, summary = report(res, reps, big_mb, time.perf_counter() - t0)
    (results_dir / "transfer.md").write_text(text)
    return summary
