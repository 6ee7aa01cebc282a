"""The sync stream's format and its sending side, shipped to instances with the agent.

A tree's manifest (kind, size, mtime per path), the diff of two manifests, and the
stream itself: ``MAGIC count total_bytes skipped_files skipped_bytes`` then entries
(``F`` file, ``L`` symlink, ``D`` directory), then ``E`` and the SHA-256 of every byte
before it. :class:`Writer` hashes what it sends, :class:`Reader` what it takes; the
receiving side (cloudgpu.remote.syncdest) compares the two.

This module runs on instances too (cloudgpu.remote.scripts ships it with the agent):
it must import nothing but the standard library.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import struct
import zlib
from collections.abc import Callable

MAGIC = b"CGPU-SYNC1"
PRE = struct.Struct("!QQQQ")  # count, total bytes, files skipped, bytes skipped
FILE = struct.Struct("!IIqQ")  # path length, mode, mtime_ns, size
LINK = struct.Struct("!II")  # path length, target length
DIR = struct.Struct("!II")  # path length, mode
LENGTH = struct.Struct("!Q")
CHUNK = 1 << 20
MAX_MANIFEST = 1 << 30  # ~10 million paths
MAX_PATH = 4096  # PATH_MAX: no scan walks a longer one, no entry may name one
MAX_RECORD = MAX_PATH + 48  # kind, size and mtime in decimal, two spaces, the path
EXIT_INTEGRITY, EXIT_IO, EXIT_MISSING = 3, 4, 5

# path -> (kind b"f"/b"l"/b"d", size, mtime_ns, mode); the root itself is b"".
Manifest = dict[bytes, tuple[bytes, int, int, int]]


class SyncError(Exception):
    """A transfer failure with its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def corrupt(what: str) -> SyncError:
    return SyncError(f"integrity check failed: {what}", EXIT_INTEGRITY)


def entry(st: os.stat_result) -> tuple[bytes, int, int, int] | None:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return (b"f", st.st_size, st.st_mtime_ns, stat.S_IMODE(mode))
    if stat.S_ISLNK(mode):
        return (b"l", 0, st.st_mtime_ns, 0)
    if stat.S_ISDIR(mode):
        return (b"d", 0, st.st_mtime_ns, stat.S_IMODE(mode))
    return None  # sockets, fifos, devices are not synced


def scan(root: bytes, exclude: Callable[[bytes, bool], bool] | None = None) -> Manifest:
    """Every regular file, symlink and directory under ``root``. Symlinks inside are kept
    as links; ``root`` itself is followed, as ``rsync -a src/`` does. ``exclude(path,
    is_dir)`` leaves entries out (an excluded directory is not even walked)."""
    try:
        top = entry(os.stat(root))
    except FileNotFoundError:
        return {}
    if top is None:
        return {}
    out: Manifest = {b"": top}
    if top[0] != b"d":
        return out
    stack = [b""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(root, rel) if rel else root) as it:
            for de in it:
                e = entry(de.stat(follow_symlinks=False))
                if e is None or is_partial(de.name):
                    continue
                path = rel + b"/" + de.name if rel else de.name
                if exclude is not None and exclude(path, e[0] == b"d"):
                    continue
                out[path] = e
                if e[0] == b"d":
                    stack.append(path)
    return out


def encode_manifest(m: Manifest) -> bytes:
    parts = [
        b"%s%d %d %s" % (k, size, mtime // 1_000_000_000, p) for p, (k, size, mtime, _) in m.items()
    ]
    return zlib.compress(b"\0".join(parts), 1)


def decode_manifest(data: bytes, limit: int = MAX_MANIFEST) -> dict[bytes, tuple[bytes, int, int]]:
    """path -> (kind, size, mtime in whole seconds); bounded, whatever the peer sent.

    Inflated a chunk at a time and read record by record, so what is held is what the
    records name: a record longer than any path a scan could have walked is refused at
    once, and a stream inflating past ``limit`` bytes is refused when it gets there."""
    out: dict[bytes, tuple[bytes, int, int]] = {}
    z = zlib.decompressobj()
    pending, rest, total = data, b"", 0
    try:
        while True:
            chunk = z.decompress(pending, CHUNK)
            pending = z.unconsumed_tail
            if not chunk and not pending:
                break
            total += len(chunk)
            if total > limit:
                raise corrupt(f"a manifest over {limit} bytes")
            *records, rest = (rest + chunk).split(b"\0")
            for rec in records:
                _record(out, rec)
            if len(rest) > MAX_RECORD:
                raise corrupt(f"a manifest record over {MAX_RECORD} bytes")
        if total:
            _record(out, rest)
    except (zlib.error, ValueError) as exc:
        raise corrupt(f"unreadable manifest ({exc})") from exc
    return out


def _record(out: dict[bytes, tuple[bytes, int, int]], rec: bytes) -> None:
    size, mtime, path = rec[1:].split(b" ", 2)
    out[path] = (rec[:1], int(size), int(mtime))


def read_manifest(r: Reader) -> dict[bytes, tuple[bytes, int, int]]:
    """A length-prefixed manifest from ``r`` (not hashed: it precedes the stream)."""
    (n,) = LENGTH.unpack(r.take(LENGTH.size, hashed=False))
    if n > MAX_MANIFEST:
        raise corrupt(f"a manifest of {n} bytes")
    return decode_manifest(r.take(n, hashed=False))


def changed(local: Manifest, remote: dict[bytes, tuple[bytes, int, int]]) -> list[bytes]:
    """Paths of ``local`` the peer lacks or holds in another kind, size or mtime."""
    out = []
    for path, (kind, size, mtime, _) in local.items():
        have = remote.get(path)
        if (
            have is None
            or have[0] != kind
            or (kind != b"d" and (have[1], have[2]) != (size, mtime // 1_000_000_000))
        ):
            out.append(path)
    return out


class Writer:
    """Buffers stream bytes, hashes them and hands them on in large blocks."""

    def __init__(
        self, sink: Callable[[bytes], object], on_data: Callable[[int], None] | None = None
    ) -> None:
        self.sink, self.on_data = sink, on_data
        self.parts: list[bytes] = []
        self.size = 0
        self.hash = hashlib.sha256()

    def write(self, b: bytes) -> None:
        if not self.parts and len(b) >= CHUNK:  # a big block goes out as it is, uncopied
            self.hash.update(b)
            self.sink(b)
            return
        self.parts.append(b)
        self.size += len(b)
        if self.size >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            block = b"".join(self.parts)
            self.parts, self.size = [], 0
            self.hash.update(block)
            self.sink(block)

    def finish(self) -> None:
        self.flush()
        self.sink(b"E" + self.hash.digest())


def pack(root: bytes, local: Manifest, paths: list[bytes], w: Writer) -> None:
    """Stream ``paths`` (keys of ``local``) of the tree at ``root`` into ``w``."""
    total = sum(local[p][1] for p in paths)
    w.write(MAGIC + PRE.pack(len(paths), total, *skipped(local, paths)))
    for path in sorted(paths):  # parents before children
        kind, size, mtime, mode = local[path]
        full = os.path.join(root, path) if path else root
        if kind == b"d":
            w.write(b"D" + DIR.pack(len(path), mode) + path)
        elif kind == b"l":
            target = os.readlink(full)
            w.write(b"L" + LINK.pack(len(path), len(target)) + path + target)
        else:
            _pack_file(full, path, size, mtime, mode, w)
    w.finish()


def _pack_file(full: bytes, path: bytes, size: int, mtime: int, mode: int, w: Writer) -> None:
    with open(full, "rb", buffering=0) as f:
        w.write(b"F" + FILE.pack(len(path), mode, mtime, size) + path)
        left = size
        while left > 0:
            block = f.read(min(left, CHUNK))
            if not block:  # shrank while we read it: the stream would be malformed
                raise SyncError(f"{os.fsdecode(full)}: file changed while being sent", EXIT_IO)
            w.write(block)
            if w.on_data:
                w.on_data(len(block))
            left -= len(block)


class Reader:
    """Exact reads from a byte source, hashing everything taken."""

    def __init__(self, source: Callable[[int], bytes]) -> None:
        self.source = source
        self.buf = b""
        self.pos = 0
        self.hash = hashlib.sha256()

    def take(self, n: int, hashed: bool = True) -> bytes:
        """Exactly ``n`` bytes (for headers and small files)."""
        have = len(self.buf) - self.pos
        if have < n:
            parts = [self.buf[self.pos :]]
            while have < n:
                more = self.source(max(CHUNK, n - have))
                if not more:
                    raise SyncError("stream ended early (connection lost?)", EXIT_INTEGRITY)
                parts.append(more)
                have += len(more)
            self.buf, self.pos = b"".join(parts), 0
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        if hashed:
            self.hash.update(out)
        return out

    def take_some(self, n: int) -> bytes:
        """Between 1 and ``n`` bytes, without gathering: big files stream through."""
        if self.pos >= len(self.buf):
            self.buf, self.pos = self.source(CHUNK), 0
            if not self.buf:
                raise SyncError("stream ended early (connection lost?)", EXIT_INTEGRITY)
        out = self.buf[self.pos : self.pos + n]  # the whole buffer: CPython copies nothing
        self.pos += len(out)
        self.hash.update(out)
        return out


def skipped(local: Manifest, sent: list[bytes]) -> tuple[int, int]:
    """(files, bytes) of ``local`` not in ``sent``: what an incremental sync skipped."""
    chosen = set(sent)
    files = [v for p, v in local.items() if v[0] == b"f" and p not in chosen]
    return len(files), sum(v[1] for v in files)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def big_pipe(fd: int) -> None:
    """A 1 MiB pipe instead of 64 KiB: fewer wake-ups per byte on bulk transfers."""
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), CHUNK)
    except OSError:
        pass  # above the user's pipe limit: the default size works


PARTIAL = b".cgpu-%d-%s-%d.part"  # pid, transfer, sequence: not yet verified and renamed


def is_partial(name: bytes) -> bool:
    return name.startswith(b".cgpu-") and name.endswith(b".part")
