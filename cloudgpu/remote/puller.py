"""The instance-side object puller: one stdlib-only script, run with the instance's python3.

The client lists the objects and signs one short-lived URL per object (S3 presigned GET,
GCS V4 signed URL, Azure SAS); this script gets that manifest (gzip JSON, a file the
client copied over SSH and that this script deletes once read) and downloads straight
onto the instance's disk. No cloud credential is ever on the instance: a URL grants one
read of one object until it expires. It must import nothing but the standard library and
never import cloudgpu, so it runs on any stock GPU image (``python3 -c SOURCE ...``).

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

Exit statuses: 0 ok, 2 usage, 10 access denied, 11 URL expired, 12 not found,
13 integrity failure, 14 I/O error, 15 network failure.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import http.client
import json
import os
import queue
import random
import re
import ssl
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

EXIT_USAGE, EXIT_AUTH, EXIT_EXPIRED, EXIT_NOTFOUND = 2, 10, 11, 12
EXIT_INTEGRITY, EXIT_IO, EXIT_NET = 13, 14, 15
CHUNK = 1 << 20
PART_SUFFIX = ".cloudgpu-part"
RETRIES = 5
TIMEOUT_S = 60.0
USER_AGENT = "cloudgpu-puller/1"
_ERR_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")
_ERR_MSG = re.compile(rb"<Message>([^<]{1,300})</Message>")


class Fail(Exception):
    """A failure that ends the pull, with its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Retry(Exception):
    """A transient failure (connection lost, 5xx, throttled): try again."""


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


# ---------------------------------------------------------------- HTTP


class Http:
    """One kept-alive connection per (thread, host): small objects cost one round trip."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._tls = ssl.create_default_context()

    def _conn(self, scheme: str, netloc: str, fresh: bool) -> http.client.HTTPConnection:
        conns: dict[tuple[str, str], http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "conns", {}
        )
        key = (scheme, netloc)
        conn = conns.get(key)
        if conn is not None and not fresh:
            return conn
        if conn is not None:
            conn.close()
        if scheme == "https":
            conn = http.client.HTTPSConnection(netloc, timeout=TIMEOUT_S, context=self._tls)
        else:
            conn = http.client.HTTPConnection(netloc, timeout=TIMEOUT_S)
        conns[key] = conn
        return conn

    def get(self, url: str, start: int, end: int | None, sink: Callable[[bytes], None]) -> int:
        """GET bytes ``start..end`` (inclusive; None: to the end) of ``url`` into ``sink``;
        returns the bytes received. Raises Retry (transient) or Fail."""
        parts = urlsplit(url)
        target = parts.path + ("?" + parts.query if parts.query else "")
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end}"
        conn = self._conn(parts.scheme, parts.netloc, fresh=False)
        try:
            try:
                conn.request("GET", target, headers=headers)
            except (http.client.HTTPException, OSError):
                conn = self._conn(parts.scheme, parts.netloc, fresh=True)  # stale keep-alive
                conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
            if resp.status not in (200, 206):
                body = resp.read(65536)
                raise _http_error(resp.status, body)
            if start and resp.status != 206:
                raise Fail("the store ignored the Range header", EXIT_NET)
            want = None if end is None else end - start + 1
            got = 0
            while block := resp.read(CHUNK):
                got += len(block)
                if want is not None and got > want:
                    raise Fail("the store sent more bytes than asked for", EXIT_NET)
                sink(block)
            if want is not None and got != want:
                raise Retry(f"short read: {got} of {want} bytes")
            return got
        except (http.client.HTTPException, OSError) as exc:
            self._conn(parts.scheme, parts.netloc, fresh=True)
            if (
                isinstance(exc, OSError)
                and not isinstance(exc, ConnectionError | TimeoutError)
                and exc.errno in (28, 30, 122)  # ENOSPC EROFS EDQUOT: the disk, not the net
            ):
                raise Fail(f"disk: {exc.strerror}", EXIT_IO) from exc
            raise Retry(f"{type(exc).__name__}: {exc}") from exc


def _http_error(status: int, body: bytes) -> Exception:
    code_m, msg_m = _ERR_CODE.search(body), _ERR_MSG.search(body)
    code = code_m.group(1).decode(errors="replace") if code_m else ""
    msg = msg_m.group(1).decode(errors="replace") if msg_m else ""
    if not msg and body[:1] == b"{":
        try:
            msg = str(json.loads(body).get("error", {}).get("message", ""))
        except (ValueError, AttributeError):
            msg = ""
    text = f"HTTP {status}" + (f" {code}" if code else "") + (f": {msg}" if msg else "")
    lowered = (code + " " + msg + " " + body[:2000].decode(errors="replace")).lower()
    if status in (400, 401, 403) and ("expire" in lowered or "time frame" in lowered):
        return Fail(f"signed URL expired ({text})", EXIT_EXPIRED)
    if status in (401, 403):
        return Fail(f"access denied ({text})", EXIT_AUTH)
    if status == 404:
        return Fail(f"not found ({text})", EXIT_NOTFOUND)
    if status in (408, 429) or status >= 500:
        return Retry(text)
    return Fail(text, EXIT_NET)


def with_retries(what: str, fn: Callable[[], Any], stop: threading.Event) -> Any:
    delay = 0.2
    for attempt in range(RETRIES + 1):
        if stop.is_set():
            raise Fail("stopped", EXIT_NET)
        try:
            return fn()
        except Retry as exc:
            if attempt == RETRIES:
                raise Fail(f"{what}: {exc} (after {RETRIES} retries)", EXIT_NET) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")


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


def _write_json(path: str, data: Any) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


# ---------------------------------------------------------------- the pull


class Pull:
    """One pull: the queue of work, the counters, the index."""

    def __init__(self, m: dict[str, Any], out: Callable[[dict[str, Any]], None]) -> None:
        self.m = m
        self.out = out
        self.tree = Tree(m["dest"])
        self.http = Http()
        self.part_size = int(m.get("part_size") or 32 << 20)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.fail: Fail | None = None
        self.work: queue.Queue[Callable[[], None] | None] = queue.Queue()
        os.makedirs(m["state_dir"], exist_ok=True)
        key = hashlib.sha256(self.tree.root.encode()).hexdigest()[:16]
        self.index_path = os.path.join(m["state_dir"], f"index-{key}.json")
        self.index: dict[str, list[Any]] = _read_json(self.index_path) or {}
        self.total = self.done = self.resumed = 0
        self.objects = self.objects_done = self.skipped = self.skipped_bytes = 0
        self.t0 = time.monotonic()

    # -- counters
    def advance(self, n: int) -> None:
        with self.lock:
            self.done += n

    def finished(self, obj: dict[str, Any], path: str) -> None:
        mtime = obj.get("mtime")
        if mtime:
            os.utime(path, (mtime, mtime))
        st = os.stat(path)
        with self.lock:
            self.objects_done += 1
            self.index[obj["rel"]] = [st.st_size, st.st_mtime_ns, obj.get("id", "")]

    def progress(self, ev: str = "progress") -> dict[str, Any]:
        with self.lock:
            return {
                "ev": ev,
                "done": self.done,
                "total": self.total,
                "objects_done": self.objects_done,
                "objects": self.objects,
                "skipped": self.skipped,
                "skipped_bytes": self.skipped_bytes,
                "resumed_bytes": self.resumed,
                "seconds": round(time.monotonic() - self.t0, 3),
            }

    # -- planning
    def plan(self) -> None:
        for obj in self.m["objects"]:
            path = self.tree.target(obj["rel"])
            if self.present(obj, path):
                self.skipped += 1
                self.skipped_bytes += int(obj["size"])
                continue
            self.objects += 1
            self.total += int(obj["size"])
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
            self.work.put(lambda: self.small(obj, path))
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
                self.advance(len(block))

            def attempt() -> None:
                if pos[0]:  # a retry starts the object over
                    self.advance(-pos[0])
                    pos[0] = 0
                    os.ftruncate(fd, 0)
                    h[0] = new_hash(check)
                self.http.get(obj["url"], 0, None, sink)

            with_retries(obj["rel"], attempt, self.stop)
            if pos[0] != int(obj["size"]):
                raise Fail(f"{obj['rel']}: got {pos[0]} of {obj['size']} bytes", EXIT_INTEGRITY)
            bad = verify(check, h[0], None)
            if bad:
                raise Fail(f"{obj['rel']}: integrity check failed: {bad}", EXIT_INTEGRITY)
        except BaseException:
            os.close(fd)
            _unlink(part)
            raise
        os.close(fd)
        os.replace(part, path)
        self.finished(obj, path)

    # -- workers
    def worker(self) -> None:
        while True:
            task = self.work.get()
            if task is None:
                return
            if self.stop.is_set():
                continue
            try:
                task()
            except Fail as exc:
                self._failed(exc)
            except OSError as exc:
                self._failed(Fail(f"{exc.filename or ''}: {exc.strerror or exc}", EXIT_IO))

    def _failed(self, exc: Fail) -> None:
        expires = float(self.m.get("expires_at") or 0)
        if exc.code == EXIT_AUTH and expires and time.time() > expires - 60:
            # Some stores (Azurite, and Azure without error details) say only "denied"
            # when a SAS has run out: past the window, that is what it means.
            exc = Fail(f"signed URL expired at {_utc(expires)}: {exc}", EXIT_EXPIRED)
        with self.lock:
            if self.fail is None:
                self.fail = exc
        self.stop.set()

    def run(self) -> dict[str, Any]:
        self.plan()
        n = max(1, min(int(self.m.get("workers") or 32), max(self.objects, 1) * 4, 256))
        threads = [threading.Thread(target=self.worker, daemon=True) for _ in range(n)]
        for t in threads:
            t.start()
        reporter = threading.Thread(target=self.report, daemon=True)
        reporter.start()
        for _ in threads:
            self.work.put(None)
        for t in threads:
            t.join()
        self.stop.set()
        reporter.join()
        _write_json(self.index_path, self.index)
        if self.fail is not None:
            raise self.fail
        return self.progress("done")

    def report(self) -> None:
        while not self.stop.wait(0.25):
            self.out(self.progress())


class Big:
    """A large object fetched in ranged parts, resumable through its sidecar file."""

    def __init__(self, pull: Pull, obj: dict[str, Any], path: str, part_size: int) -> None:
        self.pull, self.obj, self.path = pull, obj, path
        self.size = int(obj["size"])
        self.psize = part_size
        self.count = max(1, -(-self.size // part_size))
        self.part, self.sidecar = partial_paths(path)
        self.lock = threading.Lock()
        state = _read_json(self.sidecar)
        fresh = {"id": obj.get("id", ""), "size": self.size, "part_size": part_size, "md5s": {}}
        if not (
            isinstance(state, dict)
            and {k: state.get(k) for k in ("id", "size", "part_size")}
            == {k: fresh[k] for k in ("id", "size", "part_size")}
            and os.path.exists(self.part)
        ):
            state = fresh
            _unlink(self.part)
        self.state = state
        self.fd = _open_new(self.part, self.size)
        self.left = {i for i in range(self.count) if str(i) not in state["md5s"]}
        done = sum(self._length(int(i)) for i in state["md5s"])
        with pull.lock:
            pull.resumed += done
            pull.done += done

    def _length(self, i: int) -> int:
        return min(self.psize, self.size - i * self.psize)

    def queue(self) -> None:
        if not self.left:
            self.pull.work.put(self.complete)
        for i in sorted(self.left):
            self.pull.work.put(functools.partial(self.fetch, i))

    def fetch(self, i: int) -> None:
        start, length = i * self.psize, self._length(i)
        pos = [start]
        md5 = hashlib.md5()

        def sink(block: bytes) -> None:
            _pwrite_all(self.fd, block, pos[0])
            pos[0] += len(block)
            md5.update(block)
            self.pull.advance(len(block))

        def attempt() -> None:
            nonlocal md5
            if pos[0] != start:
                self.pull.advance(start - pos[0])
                pos[0] = start
                md5 = hashlib.md5()
            self.pull.http.get(self.obj["url"], start, start + length - 1, sink)

        with_retries(f"{self.obj['rel']} part {i + 1}/{self.count}", attempt, self.pull.stop)
        with self.lock:
            # No fsync: instance NVMe does not survive the machine, and a killed process
            # leaves what it wrote in the page cache, so a part recorded here is on disk.
            self.state["md5s"][str(i)] = md5.hexdigest()
            self.left.discard(i)
            _write_json(self.sidecar, self.state)
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
            _unlink(self.part)
            _unlink(self.sidecar)
            raise
        os.close(self.fd)
        os.replace(self.part, self.path)
        _unlink(self.sidecar)
        self.pull.finished(self.obj, self.path)


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def read_manifest(path: str) -> dict[str, Any]:
    """Read and delete the manifest: its signed URLs must not outlive the pull on disk."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    finally:
        _unlink(path)
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if not isinstance(data, dict) or data.get("version") != 1:
        raise Fail("unsupported manifest", EXIT_USAGE)
    return data


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "pull":
        sys.stderr.write("usage: puller pull MANIFEST\n")
        return EXIT_USAGE
    try:
        manifest = read_manifest(argv[1])
        expires = manifest.get("expires_at")
        if expires and time.time() > float(expires):
            raise Fail("the signed URLs expired before the pull started", EXIT_EXPIRED)
        _emit(Pull(manifest, _emit).run())
    except Fail as exc:
        _emit({"ev": "error", "code": exc.code, "message": str(exc)})
        sys.stderr.write(f"{exc}\n")
        return exc.code
    except OSError as exc:
        msg = f"{exc.filename or ''}: {exc.strerror or exc}"
        _emit({"ev": "error", "code": EXIT_IO, "message": msg})
        sys.stderr.write(msg + "\n")
        return EXIT_IO
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
