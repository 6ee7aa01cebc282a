"""The instance-side object puller: one stdlib-only script, run with the instance's python3.

The client lists the objects and signs one short-lived URL per object (S3 presigned GET,
GCS V4 signed URL, Azure SAS); this script gets that manifest (gzip JSON, a file the
client copied over SSH and that this script deletes once read) and downloads straight
onto the instance's disk. No cloud credential is ever on the instance: a URL grants one
read of one object until it expires. It must import nothing but the standard library and
nothing of cloudgpu but cloudgpu.remote.objwire (shipped with it as one ``python3 -c``
program, cloudgpu.remote.scripts), so it runs on any stock GPU image.

``pull MANIFEST``:

* many objects at once (a pool of threads, one kept-alive connection per thread and host);
  objects above ``part_size`` in ranged parts written in place (``pwrite``);
* integrity per store: ``md5`` (S3 single-part ETag, GCS md5Hash, Azure Content-MD5),
  ``s3etag`` (multipart ETag: MD5 of the part MD5s, our parts aligned to the upload's),
  ``crc32c`` (GCS composite objects); a mismatch removes the file and fails;
* resume: a large object is written to ``.NAME.cloudgpu-part`` next to its target with a
  sidecar recording the object identity (ETag/generation) and the parts done, so a
  killed pull continues where it stopped; the file is renamed into place only verified;
* incremental: an index per destination (size, mtime, object identity) skips objects
  already present; an unindexed file of the right size is hashed and kept if it matches;
* progress: JSON lines on stdout (``{"ev": "progress", ...}`` about 4 times a second),
  then one ``{"ev": "done", ...}`` or ``{"ev": "error", ...}`` line.

Object names come from a bucket and are hostile: relative paths are checked again here
(no ``..``, no absolute paths) and no symlink is followed under the destination.

Exit statuses: cloudgpu/remote/objwire.py.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from cloudgpu.remote.objwire import (
    CHUNK,
    EXIT_AUTH,
    EXIT_EXPIRED,
    EXIT_INTEGRITY,
    EXIT_IO,
    EXIT_NET,
    EXIT_NOTFOUND,
    EXIT_USAGE,
    Counters,
    Fail,
    Http,
    Pool,
    emit,
    read_json,
    read_manifest,
    run_main,
    unlink,
    utc,
    with_retries,
    write_json,
)

__all__ = ["EXIT_AUTH", "EXIT_EXPIRED", "EXIT_NET", "EXIT_NOTFOUND", "EXIT_USAGE", "main"]
PART_SUFFIX = ".cloudgpu-part"


# ---------------------------------------------------------------- checksums


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


class Crc32c:
    """CRC-32C (Castagnoli), the checksum GCS keeps for every object. A C module is
    used when the image has one; the table fallback is slow (tens of MB/s) and is
    needed only for composite objects, which have no MD5."""

    def __init__(self) -> None:
        self.value = 0
        self._table: list[int] | None = None
        self._fast: Any = None
        try:
            import google_crc32c  # type: ignore[import-not-found]

            self._fast = google_crc32c.Checksum()
        except ImportError:
            self._table = _crc32c_table()
            self.value = 0xFFFFFFFF

    def update(self, data: bytes) -> None:
        if self._fast is not None:
            self._fast.update(data)
            return
        c, t = self.value, self._table
        assert t is not None
        for b in data:
            c = t[(c ^ b) & 0xFF] ^ (c >> 8)
        self.value = c

    def digest(self) -> bytes:
        if self._fast is not None:
            return bytes(self._fast.digest())
        return (self.value ^ 0xFFFFFFFF).to_bytes(4, "big")


def new_hash(check: dict[str, Any]) -> Any:
    """The running hash ``check`` needs for a whole object, or None (size only)."""
    if "md5" in check:
        return hashlib.md5()
    if "crc32c" in check:
        return Crc32c()
    return None


def verify(check: dict[str, Any], whole: Any, part_md5s: list[bytes] | None) -> str | None:
    """None when the object matches its check; else what differed."""
    if "md5" in check:
        got = whole.hexdigest()
        return None if got == check["md5"] else f"MD5 {got} != {check['md5']}"
    if "crc32c" in check:
        got = base64.b64encode(whole.digest()).decode()
        return None if got == check["crc32c"] else f"CRC32C {got} != {check['crc32c']}"
    if "s3etag" in check:
        assert part_md5s is not None
        got = hashlib.md5(b"".join(part_md5s)).hexdigest() + f"-{len(part_md5s)}"
        return None if got == check["s3etag"] else f"ETag {got} != {check['s3etag']}"
    return None


def hash_file(path: str, check: dict[str, Any]) -> str | None:
    """Check an existing file against ``check`` by reading it; None when it matches."""
    if "s3etag" in check:
        md5s = []
        with open(path, "rb") as f:
            while block := f.read(check["part_size"]):
                md5s.append(hashlib.md5(block).digest())
        return verify(check, None, md5s)
    h = new_hash(check)
    if h is None:
        return None
    with open(path, "rb") as f:
        while block := f.read(CHUNK * 8):
            h.update(block)
    return verify(check, h, None)


# ---------------------------------------------------------------- files


class Tree:
    """The destination: every path is checked, every directory made by us, no symlink
    followed (a hostile key cannot write outside the destination)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or "/"
        self._made: set[str] = set()
        self._lock = threading.Lock()
        os.makedirs(self.root, exist_ok=True)
        if os.path.islink(self.root):
            raise Fail(f"{self.root}: destination is a symlink", EXIT_IO)

    def target(self, rel: str) -> str:
        parts = rel.split("/")
        if (
            not rel
            or rel.startswith("/")
            or "\x00" in rel
            or any(p in ("", ".", "..") for p in parts)
            or parts[-1].endswith(PART_SUFFIX)
        ):
            raise Fail(f"refusing object path {rel!r}", EXIT_IO)
        path = self.root
        for p in parts[:-1]:
            path = f"{path}/{p}"
            self._dir(path)
        full = f"{path}/{parts[-1]}"
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return full
        if not stat.S_ISREG(st.st_mode):
            raise Fail(f"{full}: exists and is not a regular file", EXIT_IO)
        return full

    def _dir(self, path: str) -> None:
        if path in self._made:
            return
        with self._lock:
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    raise Fail(f"{path}: exists and is not a directory", EXIT_IO) from None
            self._made.add(path)


def partial_paths(target: str) -> tuple[str, str]:
    head, name = os.path.split(target)
    part = os.path.join(head, f".{name}{PART_SUFFIX}")
    return part, part + ".json"


def _open_new(path: str, size: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    os.ftruncate(fd, size)
    return fd


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


# ---------------------------------------------------------------- the pull


class Pull:
    """One pull: the work, the counters, the index."""

    def __init__(self, m: dict[str, Any], out: Callable[[dict[str, Any]], None]) -> None:
        self.m = m
        self.out = out
        self.tree = Tree(m["dest"])
        self.http = Http(m.get("ca_pem") or None)
        self.part_size = int(m.get("part_size") or 32 << 20)
        self.pool = Pool(float(m.get("expires_at") or 0))
        self.n = Counters()
        os.makedirs(m["state_dir"], exist_ok=True)
        key = hashlib.sha256(self.tree.root.encode()).hexdigest()[:16]
        self.index_path = os.path.join(m["state_dir"], f"index-{key}.json")
        self.index: dict[str, list[Any]] = read_json(self.index_path) or {}

    def finished(self, obj: dict[str, Any], path: str) -> None:
        mtime = obj.get("mtime")
        if mtime:
            os.utime(path, (mtime, mtime))
        st = os.stat(path)
        with self.n.lock:
            self.n.objects_done += 1
            self.index[obj["rel"]] = [st.st_size, st.st_mtime_ns, obj.get("id", "")]

    # -- planning
    def plan(self) -> None:
        for obj in self.m["objects"]:
            path = self.tree.target(obj["rel"])
            if self.present(obj, path):
                self.n.skipped += 1
                self.n.skipped_bytes += int(obj["size"])
                continue
            self.n.objects += 1
            self.n.total += int(obj["size"])
            self.schedule(obj, path)

    def present(self, obj: dict[str, Any], path: str) -> bool:
        """Already there: same size and (index) same object, or same checksum."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if st.st_size != int(obj["size"]):
            return False
        seen = self.index.get(obj["rel"])
        if seen and seen[:2] == [st.st_size, st.st_mtime_ns] and seen[2] == obj.get("id", ""):
            return True
        check = obj.get("check") or {}
        if not check or hash_file(path, check) is not None:
            return False
        self.index[obj["rel"]] = [st.st_size, st.st_mtime_ns, obj.get("id", "")]
        return True

    def schedule(self, obj: dict[str, Any], path: str) -> None:
        check = obj.get("check") or {}
        size = int(obj["size"])
        psize = int(check.get("part_size") or self.part_size)
        if size <= psize and "s3etag" not in check:
            self.pool.put(lambda: self.small(obj, path))
            return
        Big(self, obj, path, psize).queue()

    # -- one object in one stream
    def small(self, obj: dict[str, Any], path: str) -> None:
        check = obj.get("check") or {}
        part, _ = partial_paths(path)
        fd = _open_new(part, 0)
        try:
            h = [new_hash(check)]
            pos = [0]

            def sink(block: bytes) -> None:
                _pwrite_all(fd, block, pos[0])
                pos[0] += len(block)
                if h[0] is not None:
                    h[0].update(block)
                self.n.advance(len(block))

            def attempt() -> None:
                if pos[0]:  # a retry starts the object over
                    self.n.advance(-pos[0])
                    pos[0] = 0
                    os.ftruncate(fd, 0)
                    h[0] = new_hash(check)
                self.http.get(obj["url"], 0, None, sink)

            with_retries(obj["rel"], attempt, self.pool.stop)
            if pos[0] != int(obj["size"]):
                raise Fail(f"{obj['rel']}: got {pos[0]} of {obj['size']} bytes", EXIT_INTEGRITY)
            bad = verify(check, h[0], None)
            if bad:
                raise Fail(f"{obj['rel']}: integrity check failed: {bad}", EXIT_INTEGRITY)
        except BaseException:
            os.close(fd)
            unlink(part)
            raise
        os.close(fd)
        os.replace(part, path)
        self.finished(obj, path)

    def run(self) -> dict[str, Any]:
        self.plan()
        n = max(1, min(int(self.m.get("workers") or 32), max(self.n.objects, 1) * 4, 256))
        try:
            self.pool.run(n, self.n, self.out)
        finally:
            write_json(self.index_path, self.index)
        return self.n.event("done")


class Big:
    """A large object fetched in ranged parts, resumable through its sidecar file."""

    def __init__(self, pull: Pull, obj: dict[str, Any], path: str, part_size: int) -> None:
        self.pull, self.obj, self.path = pull, obj, path
        self.size = int(obj["size"])
        self.psize = part_size
        self.count = max(1, -(-self.size // part_size))
        self.part, self.sidecar = partial_paths(path)
        self.lock = threading.Lock()
        state = read_json(self.sidecar)
        fresh = {"id": obj.get("id", ""), "size": self.size, "part_size": part_size, "md5s": {}}
        if not (
            isinstance(state, dict)
            and {k: state.get(k) for k in ("id", "size", "part_size")}
            == {k: fresh[k] for k in ("id", "size", "part_size")}
            and os.path.exists(self.part)
        ):
            state = fresh
            unlink(self.part)
        self.state = state
        self.fd = _open_new(self.part, self.size)
        self.left = {i for i in range(self.count) if str(i) not in state["md5s"]}
        done = sum(self._length(int(i)) for i in state["md5s"])
        with pull.n.lock:
            pull.n.resumed += done
            pull.n.done += done

    def _length(self, i: int) -> int:
        return min(self.psize, self.size - i * self.psize)

    def queue(self) -> None:
        if not self.left:
            self.pull.pool.put(self.complete)
        for i in sorted(self.left):
            self.pull.pool.put(functools.partial(self.fetch, i))

    def fetch(self, i: int) -> None:
        start, length = i * self.psize, self._length(i)
        pos = [start]
        md5 = hashlib.md5()

        def sink(block: bytes) -> None:
            _pwrite_all(self.fd, block, pos[0])
            pos[0] += len(block)
            md5.update(block)
            self.pull.n.advance(len(block))

        def attempt() -> None:
            nonlocal md5
            if pos[0] != start:
                self.pull.n.advance(start - pos[0])
                pos[0] = start
                md5 = hashlib.md5()
            self.pull.http.get(self.obj["url"], start, start + length - 1, sink)

        what = f"{self.obj['rel']} part {i + 1}/{self.count}"
        with_retries(what, attempt, self.pull.pool.stop)
        with self.lock:
            # No fsync: instance NVMe does not survive the machine, and a killed process
            # leaves what it wrote in the page cache, so a part recorded here is on disk.
            self.state["md5s"][str(i)] = md5.hexdigest()
            self.left.discard(i)
            write_json(self.sidecar, self.state)
            last = not self.left
        if last:
            self.complete()

    def complete(self) -> None:
        check = self.obj.get("check") or {}
        try:
            if "s3etag" in check:
                md5s = [bytes.fromhex(self.state["md5s"][str(i)]) for i in range(self.count)]
                bad = verify(check, None, md5s)
            else:
                bad = hash_file(self.part, check)
            if bad:
                raise Fail(f"{self.obj['rel']}: integrity check failed: {bad}", EXIT_INTEGRITY)
        except BaseException:
            os.close(self.fd)
            unlink(self.part)
            unlink(self.sidecar)
            raise
        os.close(self.fd)
        os.replace(self.part, self.path)
        unlink(self.sidecar)
        self.pull.finished(self.obj, self.path)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "pull":
        sys.stderr.write("usage: puller pull MANIFEST\n")
        return EXIT_USAGE

    def body() -> dict[str, Any]:
        manifest = read_manifest(argv[1])
        expires = manifest.get("expires_at")
        if expires and time.time() > float(expires):
            raise Fail(
                f"the signed URLs expired at {utc(float(expires))}, before the pull started",
                EXIT_EXPIRED,
            )
        return Pull(manifest, emit).run()

    return run_main(body)
