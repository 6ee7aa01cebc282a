"""Planner benchmark: `cloudgpu plan JOB.yaml` over the whole bundled catalog, measured
beside `cloudgpu offers` (the same catalog, no sizing) and `python -c pass` in one run.

Two job files, neither filtering by GPU, so every offer in the catalog is sized:
- fits: LoRA of Llama-3-8B (most GPUs fit; the time model runs on every machine shape);
- misfit: full fine-tune of Llama-3-70B (almost nothing fits; every shape also searches
  for the cheapest fix, the planner's worst case).
Runs are interleaved so machine load hits every command alike; medians are reported,
with the in-process time of plan() alone (catalog already loaded) beside them.
Target (issue 5): `cloudgpu plan` <= 1 s on this machine.
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

from cloudgpu.catalog import load_catalog, load_registry
from cloudgpu.paths import default_paths
from cloudgpu.planner import plan
from cloudgpu.spec import parse_job

RUNS = 9
TARGET_S = 1.0
JOBS = {
    "fits": "name: fits\nworkload: {kind: lora, model: llama-3-8b, tokens: 1B}\nrun: x\n",
    "misfit": "name: misfit\nworkload: {kind: finetune, model: llama-3-70b, tokens: 1B,"
    " seq_len: 4096}\nrun: x\n",
}


def _cloudgpu() -> list[str]:
    script = Path(sys.executable).with_name("cloudgpu")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cloudgpu"]


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    # `plan` exits non-zero when nothing fits (the misfit job may): time it all the same.
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def commands(workdir: Path) -> dict[str, list[str]]:
    cg = _cloudgpu()
    out = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "cloudgpu offers --limit 20": [*cg, "offers", "--limit", "20"],
    }
    for name, text in JOBS.items():
        path = workdir / f"{name}.yaml"
        path.write_text(text)
        out[f"cloudgpu plan {name}.yaml"] = [*cg, "plan", str(path), "--all-providers"]
    return out


def in_process(home: str, runs: int) -> dict[str, list[float]]:
    """plan() alone over the loaded catalog: the planner's share of the command."""
    offers = load_catalog(default_paths({"CLOUDGPU_HOME": home}), warn=None).offers
    registry = load_registry()
    out: dict[str, list[float]] = {}
    for name, text in JOBS.items():
        job = parse_job(text)
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            plan(job, offers, registry=registry)
            samples.append(time.perf_counter() - t0)
        out[f"plan() {name}, {len(offers)} offers"] = samples
    return out


def measure(runs: int = RUNS) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "CLOUDGPU_HOME": home}
        cmds = commands(Path(home))
        for cmd in cmds.values():  # warm the OS file cache and .pyc files once
            _time(cmd, env)
        samples: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(runs):
            for name, cmd in cmds.items():
                samples[name].append(_time(cmd, env))
        samples.update(in_process(home, runs))
    return samples


def report(samples: dict[str, list[float]]) -> tuple[str, dict[str, object]]:
    base = statistics.median(samples["python -c pass"])
    offers = statistics.median(samples["cloudgpu offers --limit 20"])
    rows, data = [], {}
    for name, values in samples.items():
        med = statistics.median(values)
        is_plan = name.startswith("cloudgpu plan")
        verdict = ("meets" if med <= TARGET_S else "MISSES") if is_plan else ""
        rows.append(
            f"| `{name}` | {med:.3f} | {min(values):.3f} | {max(values):.3f} | "
            f"{med / offers:.2f}x | {f'<= {TARGET_S} s ({verdict})' if is_plan else ''} |"
        )
        data[name] = {
            "median_s": med,
            "min_s": min(values),
            "max_s": max(values),
            "vs_offers": med / offers,
        }
    load = os.getloadavg()[0]
    md = "\n".join(
        [
            "# Planner benchmark (bench/bench_plan.py)",
            "",
            f"{RUNS} interleaved runs each, wall clock of the whole process (the `plan()` rows:",
            "in-process, catalog already loaded); "
            f"{os.cpu_count()} CPUs, load average {load:.2f} at the end; `python -c pass` took "
            f"{base:.3f} s. Every offer of the bundled catalog is sized in both plan runs.",
            "",
            "| command | median s | min s | max s | vs `offers` | target |",
            "|---|---:|---:|---:|---:|---|",
            *rows,
            "",
        ]
    )
    return md, {"runs": RUNS, "load_avg": load, "results": data}


def run(results_dir: Path) -> str:
    md, data = report(measure())
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "plan.md").write_text(md)
    (results_dir / "plan.json").write_text(json.dumps(data, indent=2) + "\n")
    return md


if __name__ == "__main__":
    print(run(Path(__file__).resolve().parent / "results"))
