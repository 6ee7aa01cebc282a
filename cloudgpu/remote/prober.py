"""The instance-side probe: how fast can this machine feed its GPUs? Stdlib only.

Run as ``python3 -c SOURCE probe DIR [quick]`` on the instance (DIR on its NVMe); prints
one JSON object. It must import nothing but the standard library and never import
cloudgpu (the GPU part runs torch in a child process, only when torch is installed).

Disk, measured on a scratch file and files under ``DIR/.cloudgpu-probe`` (removed after):

* sequential read GB/s: a file written, flushed and dropped from the page cache
  (``posix_fadvise DONTNEED``), then read by 4 threads in 8 MiB blocks, with O_DIRECT
  where the filesystem allows it (else buffered after the cache drop; tmpfs is memory);
* 4 KiB random-read IOPS: 16 threads of ``pread`` at random aligned offsets (queue depth
  16, as a loader with many workers would issue them); a Python bound, conservative;
* small-file open+read rate: 8 threads opening, reading and closing 4 KiB files.

GPU, when ``python3 -c 'import torch'`` works and CUDA is available: dense BF16 matmul
TFLOPS (8192^3), HBM GB/s (device-to-device copy, read + write) and host-to-device GB/s
(pinned memory). Otherwise ``{"status": "skipped", "reason": ...}``, never a guess.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

BLOCK = 8 << 20
PAGE = 4096
GPU_TIMEOUT_S = 60

GPU_SCRIPT = r"""
import json, time
try:
    import torch
except Exception as exc:
    print(json.dumps({"status": "skipped", "reason": f"no torch ({type(exc).__name__})"}))
    raise SystemExit(0)
if not torch.cuda.is_available():
    print(json.dumps({"status": "skipped",
                      "reason": f"torch {torch.__version__} sees no CUDA device"}))
    raise SystemExit(0)
dev = torch.device("cuda")
name = torch.cuda.get_device_name(0)
def timed(fn, reps):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
mm = timed(lambda: a @ b, 20)
x = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
y = torch.empty_like(x)
cp = timed(lambda: y.copy_(x), 20)
h = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
h2d = timed(lambda: x.copy_(h, non_blocking=True), 10)
print(json.dumps({"status": "measured", "name": name, "torch": torch.__version__,
                  "bf16_tflops": 2 * n**3 / mm / 1e12, "hbm_gbs": 2 * x.numel() / cp / 1e9,
                  "h2d_gbs": x.numel() / h2d / 1e9}))
"""


def _aligned(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size)  # anonymous maps are page-aligned: what O_DIRECT needs


def _drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def _open_read(path: str) -> tuple[int, bool]:
    """An fd for reading ``path``, with O_DIRECT when the filesystem takes it."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0)), True
    except OSError:
        return os.open(path, os.O_RDONLY), False


def _threads(n: int, fn: Callable[[int], None]) -> None:
    ts = [threading.Thread(target=fn, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def write_scratch(path: str, size: int, limit_s: float) -> int:
    """Write up to ``size`` bytes (stopping at ``limit_s``: a slow disk still gets a
    verdict in time); returns the bytes written, flushed and out of the page cache."""
    block = os.urandom(BLOCK)
    t0 = time.perf_counter()
    written = 0
    with open(path, "wb") as f:
        while written < size and (written < 4 * BLOCK or time.perf_counter() - t0 < limit_s):
            f.write(block)
            written += BLOCK
    _drop_cache(path)
    return written


def seq_read(path: str, size: int, limit_s: float) -> tuple[float, bool]:
    fd, direct = _open_read(path)
    blocks = size // BLOCK
    done = [0]
    lock = threading.Lock()
    nxt = [0]
    t0 = time.perf_counter()

    def reader(_: int) -> None:
        buf = _aligned(BLOCK)
        while time.perf_counter() - t0 < limit_s:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= blocks:
                return
            n = os.preadv(fd, [buf], i * BLOCK)
            with lock:
                done[0] += n

    try:
        _threads(4, reader)
    finally:
        os.close(fd)
    return done[0] / (time.perf_counter() - t0) / 1e9, direct


def rand_read(path: str, size: int, seconds: float) -> float:
    fd, _ = _open_read(path)
    pages = size // PAGE
    count = [0]
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def reader(i: int) -> None:
        buf = _aligned(PAGE)
        rnd = random.Random(i)
        n = 0
        while time.perf_counter() < end:
            for _ in range(64):
                os.preadv(fd, [buf], rnd.randrange(pages) * PAGE)
            n += 64
        with lock:
            count[0] += n

    t0 = time.perf_counter()
    try:
        _threads(16, reader)
    finally:
        os.close(fd)
    return count[0] / (time.perf_counter() - t0)


def small_files(root: str, count: int) -> float:
    os.makedirs(root, exist_ok=True)
    body = os.urandom(PAGE)
    names = [os.path.join(root, f"{i // 1000:03d}", f"f{i:06d}") for i in range(count)]
    for d in {os.path.dirname(n) for n in names}:
        os.makedirs(d, exist_ok=True)
    for n in names:
        with open(n, "wb") as f:
            f.write(body)
    os.sync()
    for n in names:
        _drop_cache(n)
    t0 = time.perf_counter()

    def reader(i: int) -> None:
        for n in names[i::8]:
            with open(n, "rb") as f:
                f.read()

    _threads(8, reader)
    return count / (time.perf_counter() - t0)


def disk(root: str, quick: bool) -> dict[str, Any]:
    work = os.path.join(root, ".cloudgpu-probe")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        free = shutil.disk_usage(work).free
        size = min(256 << 20 if quick else 1 << 30, max(free // 4 // BLOCK * BLOCK, BLOCK))
        scratch = os.path.join(work, "scratch")
        t0 = time.perf_counter()
        size = write_scratch(scratch, size, 1.5 if quick else 4.0)
        write_s = time.perf_counter() - t0
        gbs, direct = seq_read(scratch, size, 2.0 if quick else 5.0)
        _drop_cache(scratch)
        iops = rand_read(scratch, size, 1.0 if quick else 3.0)
        files = small_files(os.path.join(work, "small"), 500 if quick else 3000)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "path": root,
        "bytes_tested": size,
        "direct_io": direct,
        "seq_write_gbs": round(size / write_s / 1e9, 3),
        "seq_read_gbs": round(gbs, 3),
        "rand_4k_iops": round(iops),
        "small_files_per_s": round(files),
        "cpus": os.cpu_count() or 1,
    }


def gpu(python: str) -> dict[str, Any]:
    try:
        out = subprocess.run(
            [python, "-c", GPU_SCRIPT],
            capture_output=True,
            text=True,
            timeout=GPU_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"status": "skipped", "reason": f"GPU probe did not finish ({type(exc).__name__})"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"status": "skipped", "reason": f"GPU probe failed: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "probe" or len(argv) < 2:
        sys.stderr.write("usage: prober probe DIR [quick] [nogpu]\n")
        return 2
    t0 = time.perf_counter()
    flags = set(argv[2:])
    try:
        result: dict[str, Any] = {"disk": disk(argv[1], "quick" in flags)}
    except OSError as exc:
        sys.stderr.write(f"{exc.filename or argv[1]}: {exc.strerror}\n")
        return 4
    if "nogpu" in flags:
        result["gpu"] = {"status": "skipped", "reason": "not asked for"}
    else:
        result["gpu"] = gpu(sys.executable or "python3")
    result["seconds"] = round(time.perf_counter() - t0, 2)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
