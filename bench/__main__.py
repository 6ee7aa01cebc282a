"""Run the benchmarks: ``python -m bench [name ...]`` (names without the bench_ prefix)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

import bench

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str]) -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_")
    )
    wanted = [f"bench_{a.removeprefix('bench_')}" for a in argv]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(names)}")
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in wanted or names:
        module = importlib.import_module(f"bench.{name}")
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        summary = module.run(RESULTS)
        print(summary)
        print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
