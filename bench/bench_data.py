"""Instance-side object pulls vs `aws s3 cp --recursive` vs today's relay, side by side.

From one local S3 server (moto's ThreadedMotoServer on loopback) onto an "instance" that
is a LocalMachine workspace (the puller runs there as its own process, exactly as it
runs over SSH on a sim or cloud instance; the SSH hop only carries the manifest and
progress lines). Contenders, interleaved in the same invocation, median of REPS:

1. cloudgpu: list + sign on the client, cloudgpu/remote/puller.py downloads (32 workers,
   large objects split only as far as it keeps every worker busy); on the large set
   also "cloudgpu, 8 MiB parts", the fixed part size used before, to show that choice;
2. awscli: ``aws s3 cp --recursive`` (defaults: 10 concurrent requests, 8 MB parts), run
   where the data lands, as the issue asks; skipped with a note when ``aws`` is absent;
3. relay: what cloudgpu did before: boto3 downloads every object to the client's cache,
   then the tree is synced to the instance.

Datasets: large = BENCH_DATA_LARGE_MB of 64 MB objects, small = BENCH_DATA_SMALL objects
of 10 KB. The issue's sizes are 2 GB and 20,000; this shared 2-core VM runs the scaled
defaults (512 MB, 5,000 objects) and the results say which sizes ran.
Targets: >= 1.5x awscli on small objects, >= 1.0x on large ones, both far ahead of relay.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudgpu.data import pull
from cloudgpu.data.select import Selector
from cloudgpu.data.stores import open_store
from cloudgpu.data.uri import parse
from cloudgpu.remote import LocalMachine

KEY, SECRET = "AKIDBENCH", "bench-secret"


def _server() -> Any:

    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


def _seed(url: str, large_mb: int, small: int) -> Any:
    import boto3

    c = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
    )
    c.create_bucket(Bucket="bench")
    obj = os.urandom(64 << 20)
    for i in range(max(1, large_mb // 64)):
        c.put_object(Bucket="bench", Key=f"large/part-{i:03d}.bin", Body=obj[i:] + obj[:i])
    body = os.urandom(10_000)

    def put(i: int) -> None:
        c.put_object(Bucket="bench", Key=f"small/{i // 1000:02d}/f{i:06d}.bin", Body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(small)))
    return c


def _env(url: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
    }


def cloudgpu_pull(url: str, prefix: str, work: Path, part_size: int | None = None) -> float:
    m = LocalMachine(work, base_env={"PATH": os.environ["PATH"]})
    t0 = time.perf_counter()
    src = parse(f"s3://bench/{prefix}")
    st = open_store(src, _env(url))
    listing = pull.list_source_with(src, st, Selector())
    pull.pull(m, listing, st, f"{m.nvme_path}/data", part_size=part_size)
    return time.perf_counter() - t0


def awscli(url: str, prefix: str, work: Path) -> float | None:
    aws = shutil.which("aws")
    if aws is None:
        return None
    t0 = time.perf_counter()
    subprocess.run(
        [
            aws,
            "s3",
            "cp",
            "--recursive",
            "--quiet",
            "--endpoint-url",
            url,
            f"s3://bench/{prefix}",
            str(work / "data"),
        ],
        check=True,
        env=_env(url),
    )
    return time.perf_counter() - t0


def relay(url: str, prefix: str, work: Path, *, client: Any) -> float:
    t0 = time.perf_counter()
    cache = work / "cache"
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix):
        for o in page.get("Contents", []):
            target = cache / o["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file("bench", o["Key"], str(target))
    m = LocalMachine(work / "inst", base_env={"PATH": os.environ["PATH"]})
    m.put_dir(cache / prefix, f"{m.nvme_path}/data")
    return time.perf_counter() - t0


def run(results: Path) -> str:
    reps = int(os.environ.get("BENCH_DATA_REPS", "3"))
    large_mb = int(os.environ.get("BENCH_DATA_LARGE_MB", "512"))
    small = int(os.environ.get("BENCH_DATA_SMALL", "5000"))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request
    server, url = _server()
    try:
        client = _seed(url, large_mb, small)
        rows = []
        for prefix, what in (
            ("large", f"{large_mb} MB in 64 MB objects"),
            ("small", f"{small:,} x 10 KB objects"),
        ):
            runs: dict[str, Callable[[Path], float | None]] = {
                "cloudgpu": functools.partial(cloudgpu_pull, url, prefix),
                "awscli": functools.partial(awscli, url, prefix),
                "relay": functools.partial(relay, url, prefix, client=client),
            }
            if prefix == "large":
                runs["cloudgpu 8 MiB parts"] = functools.partial(
                    cloudgpu_pull, url, prefix, part_size=8 << 20
                )
            times: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(reps):
                for name, fn in runs.items():
                    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
                        t = fn(Path(tmp))
                    if t is not None:
                        times[name].append(t)
            med = {k: statistics.median(v) for k, v in times.items() if v}
            rows.append((what, med, small if prefix == "small" else max(1, large_mb // 64)))
    finally:
        server.stop()
    return _report(results, rows, reps, large_mb, small)


def _report(results: Path, rows: list[Any], reps: int, large_mb: int, small: int) -> str:
    lines = [
        "# Object-store pulls: cloudgpu's instance-side puller vs awscli vs the client relay",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, moto S3 on loopback, "
        f"median of {reps}; written by `python -m bench data`.",
        f"Sizes run: large {large_mb} MB (issue: 2 GB), small {small:,} objects (issue: 20,000).",
        "",
        "| dataset | cloudgpu | awscli `s3 cp --recursive` | relay via client "
        "| vs awscli | vs relay |",
        "|---|---|---|---|---|---|",
    ]
    for what, med, n in rows:
        c, a, r = med.get("cloudgpu"), med.get("awscli"), med.get("relay")
        lines.append(
            f"| {what} | {c:.2f} s ({n / c:,.0f} obj/s) | "
            + (f"{a:.2f} s ({n / a:,.0f} obj/s)" if a else "not installed")
            + f" | {r:.2f} s | "
            + (f"{a / c:.2f}x" if a else "-")
            + f" | {r / c:.2f}x |"
        )
    for what, med, _ in rows:
        fixed, c = med.get("cloudgpu 8 MiB parts"), med.get("cloudgpu")
        if fixed and c:
            lines.append(
                f"\n{what}: with the former fixed 8 MiB parts {fixed:.2f} s "
                f"({fixed / c:.2f}x the time of parts sized to the workers)."
            )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines.append(f"\nLoad average while it ran (a shared machine): {load}.")
    text = "\n".join(lines) + "\n"
    (results / "data.md").write_text(text)
    return text
