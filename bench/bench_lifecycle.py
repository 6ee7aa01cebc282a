"""Overhead of the lifecycle itself, on the sim cloud with zero boot delay.

Measured with the real CLI as a subprocess (`python -m cloudgpu launch job.yaml --yes`):

* start -> first line: from starting the command to the job's first output line
  (plan, provision, SSH + host key check, bootstrap, staging a small dir, start of run);
* teardown: from the job's last output line to the command's exit (terminate, verify,
  record spend);

beside baselines run in the same session: `python -c pass` (interpreter start), the CLI's
own start (`python -m cloudgpu --version`) and one `ssh host true` to a sim instance
(OpenSSH connect + auth + exec). Targets (issue 3): start -> first line <= 2 s median,
teardown <= 1 s. Results go to bench/results/lifecycle.md.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cloudgpu_providers.sim import SimProvider

from cloudgpu.paths import default_paths
from cloudgpu.provider import CreateRequest, InstanceState, ProviderContext
from cloudgpu.sshkeys import ensure_keypair

RUNS = 7
CONFIG = """
[providers.local]
enabled = false

[providers.sim]
enabled = true
boot_delay = 0

[[providers.sim.offers]]
instance_type = "sim.bench"
gpu = "L4"
gpu_count = 1
gpu_memory_gb = 24
vcpus = 4
memory_gb = 16
price_per_hour = 0.8
"""
JOB = """
name: bench
resources: {gpu: L4}
data: [{src: ./data, dst: /nvme/data}]
run: |
  echo FIRST-LINE
  ls /nvme/data | wc -l
  echo LAST-LINE
"""


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _time(fn: Callable[[], object], runs: int = RUNS) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _launch_once(job: Path, env: dict[str, str]) -> tuple[float, float]:
    """(start -> first job line, last job line -> exit) of one launch, in seconds."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", "launch", str(job), "--yes"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    first = last = None
    for raw in proc.stdout:
        line = raw.decode(errors="replace").strip()
        if line == "FIRST-LINE":
            first = time.perf_counter()
        elif line == "LAST-LINE":
            last = time.perf_counter()
    rc = proc.wait()
    end = time.perf_counter()
    if rc != 0 or first is None or last is None:
        raise RuntimeError(f"launch failed (exit {rc}); see the job log under {env}")
    return first - t0, end - last


def _ssh_true_baseline(home: Path, env: dict[str, str]) -> list[float]:
    paths = default_paths({"CLOUDGPU_HOME": str(home)}).ensure()
    key, pub = ensure_keypair(paths.keys_dir)
    sim = SimProvider(
        ProviderContext(config={"enabled": True, "boot_delay": 0}, paths=paths, env=env)
    )
    offer = sim.offers()[0]
    inst = sim.create(
        CreateRequest(offer=offer, name="bench-ssh", tags={"cloudgpu-job": "b"}, ssh_public_key=pub)
    )
    try:
        while (cur := sim.describe(inst.id)).state == InstanceState.PENDING:
            time.sleep(0.05)
        assert cur.ssh is not None
        argv = [
            "ssh",
            "-i",
            str(key),
            "-p",
            str(cur.ssh.port),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            f"{cur.ssh.user}@{cur.ssh.host}",
            "true",
        ]
        return _time(lambda: subprocess.run(argv, check=True))
    finally:
        sim.terminate(inst.id)


Rows = list[tuple[str, list[float], float | None]]


def _measure() -> Rows:
    """Baselines and launches, side by side in one sandboxed CLOUDGPU_HOME."""
    with tempfile.TemporaryDirectory(prefix="cloudgpu-bench-lifecycle-") as tmp:
        root = Path(tmp)
        home = root / "home"
        (home / "config").mkdir(parents=True)
        (home / "config" / "config.toml").write_text(CONFIG)
        data = root / "data"
        data.mkdir()
        for i in range(100):
            (data / f"f{i:03d}.txt").write_text(f"{i}\n" * 100)
        job = root / "job.yaml"
        job.write_text(JOB)
        env = {**os.environ, "CLOUDGPU_HOME": str(home)}
        env.pop("CLOUDGPU_SIM", None)
        python = _time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))
        cli = _time(
            lambda: subprocess.run(
                [sys.executable, "-m", "cloudgpu", "--version"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        )
        ssh_true = _ssh_true_baseline(home, env)
        _launch_once(job, env)  # warm the page cache and known_hosts like a second use
        launches = [_launch_once(job, env) for _ in range(RUNS)]
    return [
        ("baseline: python -c pass", python, None),
        ("baseline: cloudgpu --version", cli, None),
        ("baseline: ssh host true (sim)", ssh_true, None),
        ("launch: start -> first job line", [a for a, _ in launches], 2.0),
        ("launch: last job line -> exit (teardown)", [b for _, b in launches], 1.0),
    ]


def run(results_dir: Path) -> str:
    load = os.getloadavg()[0]
    rows = _measure()
    lines = [
        "# Lifecycle overhead on sim (zero boot delay)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with "
        f"`python -m bench lifecycle`; {RUNS} runs each, after one warm-up launch; "
        "a job staging 100 small files. Times in seconds. Load average at the start: "
        f"{load:.1f} on {os.cpu_count()} CPUs (other work on the machine slows every row).",
        "",
        "| what | median | min | max | target | x ssh true |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    base = _median(rows[2][1])
    for name, xs, target in rows:
        verdict = (
            ""
            if target is None
            else (f"<= {target:g} {'ok' if _median(xs) <= target else 'MISSED'}")
        )
        lines.append(
            f"| {name} | {_median(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} | {verdict} | "
            f"{_median(xs) / base:.1f} |"
        )
    (results_dir / "lifecycle.md").write_text("\n".join(lines) + "\n")
    return (
        f"start->first line {_median(rows[3][1]):.2f} s (target 2), teardown "
        f"{_median(rows[4][1]):.2f} s (target 1), ssh true {base:.3f} s"
    )
