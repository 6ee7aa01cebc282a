"""Scale benchmark: a synthetic catalog of 1,000,000 offers filtered and ranked to the
top 20, against a naive baseline (filter with one comprehension, then sorted() over all
survivors) run on the same offers in the same process.

Each case runs in a fresh child process so its peak RSS (resource.getrusage ru_maxrss)
is its own: the figure includes the synthetic catalog itself. A second case writes the
million offers as a real offer file and loads it with load_catalog before querying.
Targets (issue 2): <= 2 s and <= 1 GiB peak memory.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cloudgpu.catalog import snapshot
from cloudgpu.catalog.catalog import load_catalog
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.catalog.query import OfferQuery, query_offers, sort_key
from cloudgpu.paths import default_paths

N = 1_000_000
REPEATS = 3
QUERIES: dict[str, OfferQuery] = {
    "--gpu H100 --region 'us-*' --max-price 100 --sort gpu-hour --limit 20": OfferQuery(
        gpu="H100", regions=("us-*",), max_price=100.0, sort="gpu-hour", limit=20
    ),
    "--sort perf-per-dollar --limit 20 (no filter: every offer ranked)": OfferQuery(
        sort="perf-per-dollar", limit=20
    ),
}


def synthetic(n: int, seed: int = 7) -> list[Offer]:
    """n offers over the registry's GPUs, 6 providers, 60 regions, 2 markets."""
    rng = random.Random(seed)
    gpus = [s for s in load_registry().all() if s.is_gpu]
    providers = ["aws", "gcp", "azure", "runpod", "lambda", "vast"]
    regions = [f"{area}-{i}" for area in ("us", "europe", "asia", "me", "sa") for i in range(12)]
    counts = (1, 2, 4, 8)
    out = []
    for i in range(n):
        spec = gpus[i % len(gpus)]
        count = counts[rng.randrange(4)]
        region = regions[rng.randrange(len(regions))]
        out.append(
            Offer(
                providers[i % 6],
                f"type-{i % 5000}",
                region,
                region + "-a",
                "spot" if i & 1 else "on_demand",
                spec.name,
                count,
                spec.memory_gb,
                float(8 * count),
                float(64 * count),
                round(rng.lognormvariate(0.5, 0.8) * count, 4),
            )
        )
    return out


def naive(offers: list[Offer], q: OfferQuery) -> list[Offer]:
    """Baseline: the obvious code, one combined filter pass, then a full sort."""
    reg = load_registry()
    names = reg.matches(q.gpu) if q.gpu else {s.name for s in reg.all() if s.is_gpu}
    kept = [
        o
        for o in offers
        if o.gpu in names
        and (q.max_price is None or o.price_per_hour <= q.max_price)
        and (not q.regions or o.region.startswith("us-"))
    ]
    return sorted(kept, key=sort_key(q.sort, reg))[: q.limit]


def _median_time(fn: object, repeats: int = REPEATS) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def child_in_memory(n: int) -> dict[str, object]:
    t0 = time.perf_counter()
    offers = synthetic(n)
    build_s = time.perf_counter() - t0
    reg = load_registry()
    cases = {}
    for label, q in QUERIES.items():
        ours_s, ours = _median_time(lambda q=q: query_offers(offers, q, reg))
        base_s, base = _median_time(lambda q=q: naive(offers, q))
        same = [o.key for o in ours] == [o.key for o in base]  # type: ignore[attr-defined]
        cases[label] = {"ours_s": ours_s, "naive_s": base_s, "same_top20": same}
    return {"build_s": build_s, "cases": cases, "peak_rss_mb": _peak_mb()}


def child_from_file(n: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = default_paths({"CLOUDGPU_HOME": tmp}).ensure()
        data_dir = Path(tmp) / "snap"
        snapshot.write(
            data_dir / "offers-synthetic.json",
            snapshot.OfferFile("synthetic", "bench", "2026-12-01T00:00:00Z", synthetic(n)),
        )
        size_mb = (data_dir / "offers-synthetic.json").stat().st_size / 2**20
        reg = load_registry()
        q = next(iter(QUERIES.values()))
        t0 = time.perf_counter()
        cat = load_catalog(paths, snapshot_dir=data_dir, gpus=reg.matches("H100"))
        top = query_offers(cat.offers, q, reg)
        total_s = time.perf_counter() - t0
    return {"file_mb": size_mb, "load_and_query_s": total_s, "rows_built": len(cat.offers),
            "top": len(top), "peak_rss_mb": _peak_mb()}  # fmt: skip


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _spawn(kind: str, n: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_catalog_scale", kind, str(n)],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    result: dict[str, object] = json.loads(out.stdout)
    return result


def render(mem: dict, disk: dict, n: int) -> str:  # type: ignore[type-arg]
    lines = [
        "# Catalog scale benchmark (bench/bench_catalog_scale.py)",
        "",
        f"{n:,} synthetic offers (all GPU models, 6 providers, 60 regions, 2 markets), "
        f"median of {REPEATS} runs per query, same process and same offers for both columns. "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}.",
        "",
        "| query | cloudgpu s | naive filter + sorted() s | speed-up | same top 20 | target |",
        "|---|---:|---:|---:|---|---|",
    ]
    for label, c in mem["cases"].items():
        verdict = "meets" if c["ours_s"] <= 2 else "MISSES"
        lines.append(
            f"| `{label}` | {c['ours_s']:.3f} | {c['naive_s']:.3f} | "
            f"{c['naive_s'] / c['ours_s']:.1f}x | {c['same_top20']} | <= 2 s ({verdict}) |"
        )
    peak = mem["peak_rss_mb"]
    lines += [
        "",
        "A selective query costs one pass over the offers either way (the naive inline "
        "comprehension avoids a function call per offer and can win there); ranking many "
        "survivors is where the bounded heap beats sorting everything.",
        "",
        f"Peak RSS of the in-memory run: {peak:.0f} MiB (includes the 1M Offer objects; "
        f"target <= 1024 MiB: {'meets' if peak <= 1024 else 'MISSES'}). "
        f"Building the synthetic offers took {mem['build_s']:.2f} s (not counted).",
        "",
        f"From a file: the same {n:,} offers written as an offer file ({disk['file_mb']:.0f} MiB "
        f"JSON), read with `load_catalog(..., gpus=H100 family)` and queried: "
        f"{disk['load_and_query_s']:.2f} s, {disk['rows_built']:,} Offer records built, "
        f"peak RSS {disk['peak_rss_mb']:.0f} MiB.",
        "",
    ]
    return "\n".join(lines)


def run(results_dir: Path, n: int = N) -> str:
    mem = _spawn("memory", n)
    disk = _spawn("file", n)
    md = render(mem, disk, n)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "catalog_scale.md").write_text(md)
    (results_dir / "catalog_scale.json").write_text(
        json.dumps({"n": n, "in_memory": mem, "from_file": disk}, indent=2) + "\n"
    )
    return md


if __name__ == "__main__":
    kind, count = sys.argv[1], int(sys.argv[2])
    result = child_in_memory(count) if kind == "memory" else child_from_file(count)
    print(json.dumps(result))
