"""The file-sync agent: one stdlib-only script run on both ends of a transfer.

The client imports it, and sends its own source text to the instance as
``python3 -c SOURCE OP ROOT``, so both sides run the very same code. It must therefore
import nothing but the standard library and never import cloudgpu.

Operations (stdin/stdout are the SSH channel):

* ``recv ROOT``: print the tree's manifest (length-prefixed, compressed: kind, size,
  mtime, path), then read a stream (format below) from stdin and write it under ROOT.
* ``send ROOT``: read the peer's manifest from stdin, stream what differs to stdout.

Either way one SSH session does the whole sync: the manifest goes one way and the
changed files the other.

Stream: ``MAGIC count total_bytes`` then entries (``F`` file, ``L`` symlink, ``D``
directory), then ``E`` and the SHA-256 of every byte before it. The receiver hashes what
it reads; a mismatch removes the files it wrote and fails, so a corrupted transfer is
never mistaken for a good one and the next sync sends those files again. Files whose
kind, size and mtime (whole seconds) match the peer's manifest are not sent at all: one
stream, no per-file round trip.

Exit statuses: 0 ok, 2 usage, 3 integrity failure, 4 I/O error (e.g. disk full), 5 the
source does not exist.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import struct
import sys
import zlib
from collections.abc import Callable

MAGIC = b"CGPU-SYNC1"
_PRE = struct.Struct("!QQQQ")  # count, total bytes, files skipped, bytes skipped
_FILE = struct.Struct("!IIqQ")  # path length, mode, mtime_ns, size
_LINK = struct.Struct("!II")  # path length, target length
_DIR = struct.Struct("!II")  # path length, mode
LENGTH = struct.Struct("!Q")
CHUNK = 1 << 20
MAX_MANIFEST = 1 << 30  # ~10 million paths
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


def _entry(st: os.stat_result) -> tuple[bytes, int, int, int] | None:
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
        top = _entry(os.stat(root))
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
                e = _entry(de.stat(follow_symlinks=False))
                if e is None or _is_partial(de.name):
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


def decode_manifest(data: bytes) -> dict[bytes, tuple[bytes, int, int]]:
    """path -> (kind, size, mtime in whole seconds); bounded, whatever the peer sent."""
    out: dict[bytes, tuple[bytes, int, int]] = {}
    try:
        z = zlib.decompressobj()
        raw = z.decompress(data, MAX_MANIFEST) if data else b""
        if z.unconsumed_tail:
            raise corrupt(f"a manifest over {MAX_MANIFEST} bytes")
        for rec in raw.split(b"\0") if raw else ():
            size, mtime, path = rec[1:].split(b" ", 2)
            out[path] = (rec[:1], int(size), int(mtime))
    except (zlib.error, ValueError) as exc:
        raise corrupt(f"unreadable manifest ({exc})") from exc
    return out


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
    w.write(MAGIC + _PRE.pack(len(paths), total, *skipped(local, paths)))
    for path in sorted(paths):  # parents before children
        kind, size, mtime, mode = local[path]
        full = os.path.join(root, path) if path else root
        if kind == b"d":
            w.write(b"D" + _DIR.pack(len(path), mode) + path)
        elif kind == b"l":
            target = os.readlink(full)
            w.write(b"L" + _LINK.pack(len(path), len(target)) + path + target)
        else:
            _pack_file(full, path, size, mtime, mode, w)
    w.finish()


def _pack_file(full: bytes, path: bytes, size: int, mtime: int, mode: int, w: Writer) -> None:
    with open(full, "rb", buffering=0) as f:
        w.write(b"F" + _FILE.pack(len(path), mode, mtime, size) + path)
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


def unpack(
    root: bytes, r: Reader, on_data: Callable[[int, int], None] | None = None
) -> dict[str, int]:
    """Write a stream under ``root``; verify its trailer; return what it held.

    Every file and symlink is written under a temporary name beside its destination and
    renamed into place only after the whole stream verified: a cut, corrupt or hostile
    stream leaves every file the destination already had as it was.
    """
    if r.take(len(MAGIC)) != MAGIC:
        raise SyncError("not a cloudgpu sync stream", EXIT_INTEGRITY)
    count, total, skip_files, skip_bytes = _PRE.unpack(r.take(_PRE.size))
    dest = Dest(root)
    done = files = 0
    try:
        dest.check_space(total)
        for _ in range(count):
            n = _unpack_one(dest, r)
            if n >= 0:
                files += 1
                done += n
                if done > total:
                    raise corrupt("more bytes than announced")
            if on_data:
                on_data(done, total)
        tag = r.take(1, hashed=False)
        digest = r.hash.digest()
        if tag != b"E" or r.take(32, hashed=False) != digest:
            raise corrupt("received data does not match what was sent")
        dest.commit()
    finally:
        dest.close()  # removes whatever was not committed
    return {"files": files, "bytes": done, "skipped_files": skip_files, "skipped_bytes": skip_bytes}


class Dest:
    """The receiving tree. Paths are walked one component at a time from the root's
    directory fd with O_NOFOLLOW: nothing is ever written through a symlink, whoever
    made it. ``root`` itself is the caller's choice and is followed."""

    def __init__(self, root: bytes) -> None:
        self.root = root
        self.fd: int | None = None
        self.chain: list[tuple[bytes, int]] = []  # open directory fds below the root
        self.pending: list[tuple[tuple[bytes, ...], bytes, bytes]] = []  # parent, tmp, name
        self.seq = 0
        self.token = os.urandom(4).hex().encode()  # two transfers of one process never clash
        self.swept: set[tuple[bytes, ...]] = set()  # directories cleared of stale partials

    def check_space(self, total: int) -> None:
        probe = self.root
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        try:
            st = os.statvfs(probe or b".")
        except OSError:
            return
        free = st.f_bavail * st.f_frsize
        if total > free:
            raise SyncError(
                f"No space left on device: {total} bytes to write, {free} free", EXIT_IO
            )

    def _root_fd(self, as_dir: bool) -> int:
        if self.fd is None:
            top = self.root if as_dir else os.path.dirname(self.root) or b"."
            os.makedirs(top, exist_ok=True)
            self.fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
        return self.fd

    def parent(self, path: bytes) -> tuple[int, bytes, tuple[bytes, ...]]:
        """(fd of the directory holding ``path``, its last component, the parent's parts)."""
        if not path:  # the root itself is a file: a single-file transfer
            return self._root_fd(False), os.path.basename(self.root), ()
        parts = tuple(path.split(b"/"))
        return self._walk(parts[:-1]), parts[-1], parts[:-1]

    def _walk(self, parts: tuple[bytes, ...]) -> int:
        fd = self._root_fd(True)
        keep = 0
        while keep < min(len(self.chain), len(parts)) and self.chain[keep][0] == parts[keep]:
            keep += 1
        for _, old in self.chain[keep:]:
            os.close(old)
        del self.chain[keep:]
        if self.chain:
            fd = self.chain[-1][1]
        for name in parts[keep:]:
            fd = _open_dir(fd, name)
            self.chain.append((name, fd))
        return fd

    def temp(self, parent: int, name: bytes, parts: tuple[bytes, ...]) -> bytes:
        if _kind_at(parent, name) == b"d":
            raise SyncError(f"{os.fsdecode(name)}: a directory is in the way here", EXIT_IO)
        if parts not in self.swept:  # what a transfer killed here (kill -9) left behind
            self.swept.add(parts)
            _sweep_partials(parent)
        self.seq += 1
        return PARTIAL % (os.getpid(), self.token, self.seq)

    def directory(self, path: bytes, mode: int) -> None:
        if not path:
            self._root_fd(True)
            return
        fd, name, _ = self.parent(path)
        kind = _kind_at(fd, name)
        if kind == b"l":  # the sender has a directory here now: replace the link itself
            os.unlink(name, dir_fd=fd)
        elif kind == b"f":
            raise SyncError(f"{os.fsdecode(path)}: a file is in the way here", EXIT_IO)
        if kind != b"d":
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass  # a parallel stream made it first; _open_dir refuses a link
        sub = _open_dir(fd, name)
        try:
            os.fchmod(sub, (mode & 0o777) | 0o700)
        finally:
            os.close(sub)

    def commit(self) -> None:
        for i, (parts, tmp, name) in enumerate(self.pending):
            fd = self._walk(parts)
            try:
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                del self.pending[:i]  # close() removes the rest
                raise
        self.pending = []

    def close(self) -> None:
        for parts, tmp, _ in self.pending:
            try:
                os.unlink(tmp, dir_fd=self._walk(parts))
            except (OSError, SyncError):
                pass
        self.pending = []
        for _, fd in self.chain:
            os.close(fd)
        self.chain = []
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


PARTIAL = b".cgpu-%d-%s-%d.part"  # pid, transfer, sequence: not yet verified and renamed


def _is_partial(name: bytes) -> bool:
    return name.startswith(b".cgpu-") and name.endswith(b".part")


def _sweep_partials(parent: int) -> None:
    """Remove partial files of transfers whose process is gone (killed mid-way)."""
    for name in map(os.fsencode, os.listdir(parent)):
        if not _is_partial(name):
            continue
        try:
            pid = int(name.split(b"-")[1])
            os.kill(pid, 0)
            continue  # a transfer still under way
        except (ValueError, IndexError, ProcessLookupError):
            pass
        except PermissionError:
            continue
        try:
            os.unlink(name, dir_fd=parent)
        except OSError:
            pass


def _open_dir(parent: int, name: bytes) -> int:
    """A directory below ``parent``, made if missing; never a symlink to one."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        try:
            return os.open(name, flags, dir_fd=parent)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass  # a parallel stream (pack: true) made it first
            return os.open(name, flags, dir_fd=parent)
    except (NotADirectoryError, OSError) as exc:
        if _kind_at(parent, name) == b"l":
            raise SyncError(
                f"refusing to write through the symlink {os.fsdecode(name)}", EXIT_INTEGRITY
            ) from exc
        raise


def _kind_at(parent: int, name: bytes) -> bytes | None:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    e = _entry(st)
    return e[0] if e else b"?"


def _unpack_one(dest: Dest, r: Reader) -> int:
    """Stage one entry; returns a file's size, or -1 for a directory or symlink."""
    tag = r.take(1)
    if tag == b"F":
        plen, mode, mtime, size = _FILE.unpack(r.take(_FILE.size))
        path = _safe(r.take(_bounded(plen)), root_ok=True)
        fd_dir, name, parts = dest.parent(path)
        tmp = dest.temp(fd_dir, name, parts)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(tmp, flags, 0o600, dir_fd=fd_dir)
        dest.pending.append((parts, tmp, name))
        try:
            left = size
            while left > 0:
                piece = r.take_some(left)
                write_all(fd, piece)
                left -= len(piece)
            os.fchmod(fd, mode & 0o777)  # never setuid/setgid from a stream
            os.utime(fd, ns=(mtime, mtime))
        finally:
            os.close(fd)
        return size
    if tag == b"D":
        plen, mode = _DIR.unpack(r.take(_DIR.size))
        dest.directory(_safe(r.take(_bounded(plen)), root_ok=True), mode)
        return -1
    if tag == b"L":
        plen, tlen = _LINK.unpack(r.take(_LINK.size))
        path = _safe(r.take(_bounded(plen)), root_ok=False)
        target = r.take(_bounded(tlen))
        if b"\0" in target or not target:
            raise corrupt(f"bad link target {target!r}")
        fd_dir, name, parts = dest.parent(path)
        tmp = dest.temp(fd_dir, name, parts)
        os.symlink(target, tmp, dir_fd=fd_dir)  # recreated as a link, never followed
        dest.pending.append((parts, tmp, name))
        return -1
    raise corrupt(f"bad entry tag {tag!r}")


MAX_PATH = 4096


def _bounded(n: int) -> int:
    if n > MAX_PATH:
        raise corrupt(f"a path of {n} bytes")
    return n


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _safe(path: bytes, *, root_ok: bool) -> bytes:
    """Refuse paths that could leave the destination: absolute, ``..``, ``.``, empty
    components, NUL; the root itself (empty path) only where ``root_ok``."""
    parts = path.split(b"/")
    if (
        (not path and not root_ok)
        or (path and any(p in (b"", b".", b"..") or len(p) > 255 for p in parts))
        or b"\0" in path
    ):
        raise SyncError(f"refusing unsafe path {path!r}", EXIT_INTEGRITY)
    return path


def iter_stdin() -> Callable[[int], bytes]:
    fd = sys.stdin.fileno()
    big_pipe(fd)
    return lambda n: os.read(fd, n)


def big_pipe(fd: int) -> None:
    """A 1 MiB pipe instead of 64 KiB: fewer wake-ups per byte on bulk transfers."""
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), CHUNK)
    except OSError:
        pass  # above the user's pipe limit: the default size works


def _stdout_sink(b: bytes) -> None:
    write_all(1, b)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("recv", "send"):
        sys.stderr.write("usage: agent recv|send ROOT\n")
        return 2
    op, root = argv[0], os.fsencode(os.path.expanduser(argv[1]))
    try:
        if op == "recv":
            manifest = encode_manifest(scan(root))
            _stdout_sink(LENGTH.pack(len(manifest)) + manifest)
            result = unpack(root, Reader(iter_stdin()))
            _stdout_sink(json.dumps(result).encode() + b"\n")
        else:
            peer = read_manifest(Reader(iter_stdin()))
            local = scan(root)
            if not local:
                raise SyncError(f"{argv[1]}: no such file or directory", EXIT_MISSING)
            pack(root, local, changed(local, peer), Writer(_stdout_sink))
    except SyncError as exc:
        sys.stderr.write(f"{exc}\n")
        return exc.code
    except OSError as exc:
        name = os.fsdecode(exc.filename) if isinstance(exc.filename, bytes) else exc.filename
        sys.stderr.write(f"{name or argv[1]}: {exc.strerror}\n")
        return EXIT_IO
    return 0


def skipped(local: Manifest, sent: list[bytes]) -> tuple[int, int]:
    """(files, bytes) of ``local`` not in ``sent``: what an incremental sync skipped."""
    chosen = set(sent)
    files = [v for p, v in local.items() if v[0] == b"f" and p not in chosen]
    return len(files), sum(v[1] for v in files)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
