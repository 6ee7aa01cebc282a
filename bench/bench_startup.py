"""Startup benchmark: `cloudgpu --help` and `cloudgpu offers --gpu H100 --limit 20`
over the whole bundled catalog, each beside `python -c pass` measured in the same run.

Runs are interleaved (pass, help, offers, pass, help, ...) so machine load hits all three
alike; the medians are reported. Targets (issue 2): --help <= 0.25 s, offers <= 0.5 s.
For scale, SkyPilot's `sky --help` was measured at 3.4 s on this machine class.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 15
TARGETS = {"cloudgpu --help": 0.25, "cloudgpu offers --gpu H100 --limit 20": 0.5}


def _cloudgpu() -> list[str]:
    """The installed console script next to this interpreter, else `python -m cloudgpu`."""
    script = Path(sys.executable).with_name("cloudgpu")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cloudgpu"]


def commands() -> dict[str, list[str]]:
    cg = _cloudgpu()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "cloudgpu --help": [*cg, "--help"],
        "cloudgpu offers --gpu H100 --limit 20": [*cg, "offers", "--gpu", "H100", "--limit", "20"],
    }


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def measure(runs: int = RUNS) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "CLOUDGPU_HOME": home}
        cmds = commands()
        for cmd in cmds.values():  # warm the OS file cache and .pyc files once
            _time(cmd, env)
        samples: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(runs):
            for name, cmd in cmds.items():
                samples[name].append(_time(cmd, env))
    return samples


def report(samples: dict[str, list[float]]) -> tuple[str, dict[str, object]]:
    base = statistics.median(samples["python -c pass"])
    rows, data = [], {}
    for name, values in samples.items():
        med = statistics.median(values)
        target = TARGETS.get(name)
        verdict = "" if target is None else ("meets" if med <= target else "MISSES")
        rows.append(
            f"| `{name}` | {med:.3f} | {min(values):.3f} | {max(values):.3f} | "
            f"{med - base:+.3f} | {med / base:.1f}x | "
            f"{'' if target is None else f'<= {target} s ({verdict})'} |"
        )
        data[name] = {
            "median_s": med,
            "min_s": min(values),
            "max_s": max(values),
            "target_s": target,
        }
    load = os.getloadavg()[0]
    md = "\n".join(
        [
            "# Startup benchmark (bench/bench_startup.py)",
            "",
            f"{len(samples['python -c pass'])} interleaved runs each, wall clock of the whole "
            f"process; {os.cpu_count()} CPUs, load average {load:.2f} at the end. "
            "The offers run reads the whole bundled catalog (all providers' snapshot files).",
            "",
            "| command | median s | min s | max s | minus `python -c pass` | ratio | target |",
            "|---|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
            "For scale: SkyPilot's `sky --help` takes 3.4 s on this machine class (issue 2).",
            "",
        ]
    )
    return md, {"runs": len(samples["python -c pass"]), "load_avg": load, "results": data}


def run(results_dir: Path) -> str:
    md, data = report(measure())
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "startup.md").write_text(md)
    (results_dir / "startup.json").write_text(json.dumps(data, indent=2) + "\n")
    return md


if __name__ == "__main__":
    print(run(Path(__file__).resolve().parent / "results"))
