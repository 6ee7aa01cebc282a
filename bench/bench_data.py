"""Instance-side object pulls vs `aws s3 cp --recursive` vs today's relay, side by side.

From one local S3 server (moto's ThreadedMotoServer on loopback) onto a sim instance (a
real sshd on loopback, /nvme on tmpfs so this VM's disk is not what is measured).
Contenders, interleaved in the same invocation, median of REPS, each into an empty /nvme:

1. cloudgpu: list + sign on the client, cloudgpu/remote/puller.py downloads on the
   instance (32 workers, large objects split only as far as it keeps every worker busy);
   on the large set also "cloudgpu, 8 MiB parts", the fixed part size used before;
2. awscli: ``aws s3 cp --recursive`` (defaults: 10 concurrent requests, 8 MB parts), run
   on the instance over the same SSH connection, as the issue asks (given the
   credentials: the instance-role alternative); skipped with a note when absent;
3. relay: what cloudgpu did before: boto3 downloads every object to the client's cache,
   then the tree is synced to the instance over SSH.

Client, store and instance share this machine's CPUs and loopback: the relay's two hops
cost it only CPU here, where on a real client they would cross its own connection
twice, so "vs relay" is a lower bound of the gain.

Datasets: large = BENCH_DATA_LARGE_MB of 64 MB objects, small = BENCH_DATA_SMALL objects
of 10 KB. The issue's sizes are 2 GB and 20,000; the defaults are scaled (512 MB, 5,000
objects) for a quick run; the results say which sizes ran.
Targets: >= 1.5x awscli on small objects, >= 1.0x on large ones, both far ahead of relay.
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
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

from bench.bench_transfer import _start
from cloudgpu.data import pull
from cloudgpu.data.select import Selector
from cloudgpu.data.stores import open_store
from cloudgpu.data.uri import parse
from cloudgpu.paths import default_paths
from cloudgpu.remote import SSHMachine, connect

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
    }


DEST = "/nvme/data"


def cloudgpu_pull(
    url: str, prefix: str, m: SSHMachine, cache: Path, part_size: int | None = None
) -> float:
    t0 = time.perf_counter()
    src = parse(f"s3://bench/{prefix}")
    st = open_store(src, _env(url))
    listing = pull.list_source_with(src, st, Selector())
    pull.pull(m, listing, st, DEST, part_size=part_size)
    return time.perf_counter() - t0


def awscli(url: str, prefix: str, m: SSHMachine, cache: Path) -> float | None:
    aws = shutil.which("aws")
    if aws is None:
        return None
    # The real program behind a pyenv shim: the instance's shell has no pyenv setup.
    real = subprocess.run(["pyenv", "which", "aws"], capture_output=True, text=True)
    if real.returncode == 0 and real.stdout.strip():
        aws = real.stdout.strip()
    t0 = time.perf_counter()
    cmd = f"{aws} s3 cp --recursive --quiet --endpoint-url {url} s3://bench/{prefix} {DEST}"
    if m.run(cmd, env=_env(url) | {"HOME": "/tmp"}) != 0:
        raise RuntimeError("aws s3 cp failed on the sim instance")
    return time.perf_counter() - t0


def relay(url: str, prefix: str, m: SSHMachine, cache: Path, *, client: Any) -> float:
    t0 = time.perf_counter()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix):
        for o in page.get("Contents", []):
            target = cache / o["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file("bench", o["Key"], str(target))
    m.put_dir(cache / prefix, DEST)
    return time.perf_counter() - t0


# The store's own ceiling: bare keep-alive GETs of presigned URLs from 10 threads on the
# instance, bodies read and dropped (no file, no check): no puller can beat this rate.
RAW_GETS = r"""
import http.client, sys, threading, urllib.parse
urls = open(sys.argv[1]).read().split()
def run(part):
    conn = None
    for u in part:
        p = urllib.parse.urlsplit(u)
        conn = conn or http.client.HTTPConnection(p.netloc)
        conn.request("GET", p.path + "?" + p.query)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
ts = [threading.Thread(target=run, args=(urls[i::10],)) for i in range(10)]
[t.start() for t in ts]
[t.join() for t in ts]
"""


def raw_gets(prefix: str, m: SSHMachine, cache: Path, *, client: Any) -> float:
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    urls = cache / "urls"
    urls.write_text(
        "\n".join(
            client.generate_presigned_url("get_object", Params={"Bucket": "bench", "Key": k})
            for k in keys
        )
    )
    m.put_file(urls, "/nvme/urls")
    t0 = time.perf_counter()  # the GETs only: listing and signing are not counted
    if m.run(f"python3 -c {shlex.quote(RAW_GETS)} /nvme/urls") != 0:
        raise RuntimeError("raw GETs failed on the sim instance")
    return time.perf_counter() - t0


Contender = Callable[[SSHMachine, Path], float | None]


def _contenders(url: str, prefix: str, client: Any) -> dict[str, Contender]:
    runs: dict[str, Contender] = {
        "cloudgpu": functools.partial(cloudgpu_pull, url, prefix),
        "awscli": functools.partial(awscli, url, prefix),
        "relay": functools.partial(relay, url, prefix, client=client),
    }
    if prefix == "small":
        runs["store ceiling"] = functools.partial(raw_gets, prefix, client=client)
    if prefix == "large":
        runs["cloudgpu 8 MiB parts"] = functools.partial(
            cloudgpu_pull, url, prefix, part_size=8 << 20
        )
    return runs


def run(results: Path) -> str:
    reps = int(os.environ.get("BENCH_DATA_REPS", "3"))
    large_mb = int(os.environ.get("BENCH_DATA_LARGE_MB", "512"))
    small = int(os.environ.get("BENCH_DATA_SMALL", "5000"))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request
    server, url = _server()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cgpu-bench-data-") as tmp:
        paths = default_paths({"CLOUDGPU_HOME": str(Path(tmp) / "home")}).ensure()
        provider, inst = _start(paths, nvme_tmpfs_mb=max(4096, large_mb * 2 + 1024))
        try:
            client = _seed(url, large_mb, small)
            m = connect(inst, known_hosts=paths.data_dir / "known_hosts")
            assert isinstance(m, SSHMachine)
            try:
                for prefix, what in (
                    ("large", f"{large_mb} MB in 64 MB objects"),
                    ("small", f"{small:,} x 10 KB objects"),
                ):
                    med = _timed(m, _contenders(url, prefix, client), reps)
                    rows.append((what, med, _rate(prefix, large_mb, small)))
            finally:
                m.close()
        finally:
            provider.terminate(inst.id)
            server.stop()
    return _report(results, rows, reps, large_mb, small)


def _rate(prefix: str, large_mb: int, small: int) -> Callable[[float], str]:
    """How a time reads for that dataset: MB/s for the large objects, objects/s else."""
    if prefix == "large":
        size = max(1, large_mb // 64) * 64 * (1 << 20)
        return lambda s: f"{size / s / 1e6:,.0f} MB/s"
    return lambda s: f"{small / s:,.0f} obj/s"


def _timed(m: SSHMachine, runs: dict[str, Contender], reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            if m.run(f"rm -rf {DEST}") != 0:
                raise RuntimeError(f"could not empty {DEST} on the sim instance")
            with tempfile.TemporaryDirectory(dir="/dev/shm") as cache:
                t = fn(m, Path(cache))
            if t is not None:
                times[name].append(t)
    return {k: statistics.median(v) for k, v in times.items() if v}


def _report(results: Path, rows: list[Any], reps: int, large_mb: int, small: int) -> str:
    lines = [
        "# Object-store pulls: cloudgpu's instance-side puller vs awscli vs the client relay",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, moto S3 on loopback onto "
        f"a sim instance (/nvme on tmpfs), median of {reps}; written by `python -m bench data`.",
        f"Sizes run: large {large_mb} MB (issue: 2 GB), small {small:,} objects (issue: 20,000).",
        "",
        "| dataset | cloudgpu | awscli `s3 cp --recursive` | relay via client "
        "| vs awscli | vs relay |",
        "|---|---|---|---|---|---|",
    ]
    for what, med, rate in rows:
        c, a, r = med["cloudgpu"], med.get("awscli"), med["relay"]
        lines.append(
            f"| {what} | {c:.2f} s ({rate(c)}) | "
            + (f"{a:.2f} s ({rate(a)})" if a else "not installed")
            + f" | {r:.2f} s ({rate(r)}) | "
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
    for what, med, rate in rows:
        ceiling, c = med.get("store ceiling"), med["cloudgpu"]
        if ceiling:
            lines.append(
                f"\n{what}: the store's own ceiling (bare keep-alive GETs of presigned URLs, "
                f"10 threads on the instance, bodies dropped, listing and signing not counted) "
                f"{ceiling:.2f} s ({rate(ceiling)}); cloudgpu reaches {ceiling / c:.0%} of it."
            )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines.append(f"\nLoad average while it ran (a shared machine): {load}.")
    text = "\n".join(lines) + "\n"
    (results / "data.md").write_text(text)
    return text
