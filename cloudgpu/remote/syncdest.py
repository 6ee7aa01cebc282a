"""The receiving side of a sync stream: check it, stage it, and rename it into place.

Every file and symlink is written under a temporary name beside its destination and
renamed only after the whole stream verified, so a cut, corrupt or hostile stream leaves
the destination as it was. Paths are refused if they could leave the destination, and
nothing is ever written through a symlink, whoever made it (:class:`Dest`).

This module runs on instances too (cloudgpu.remote.scripts ships it with the agent):
it must import nothing but the standard library and its sibling syncwire.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cloudgpu.remote.syncwire import (
    DIR,
    EXIT_INTEGRITY,
    EXIT_IO,
    FILE,
    LINK,
    MAGIC,
    MAX_PATH,
    PARTIAL,
    PRE,
    Reader,
    SyncError,
    corrupt,
    entry,
    is_partial,
    write_all,
)


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
    count, total, skip_files, skip_bytes = PRE.unpack(r.take(PRE.size))
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


def _sweep_partials(parent: int) -> None:
    """Remove partial files of transfers whose process is gone (killed mid-way)."""
    for name in map(os.fsencode, os.listdir(parent)):
        if not is_partial(name):
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
    e = entry(st)
    return e[0] if e else b"?"


def _unpack_one(dest: Dest, r: Reader) -> int:
    """Stage one entry; returns a file's size, or -1 for a directory or symlink."""
    tag = r.take(1)
    if tag == b"F":
        plen, mode, mtime, size = FILE.unpack(r.take(FILE.size))
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
        plen, mode = DIR.unpack(r.take(DIR.size))
        dest.directory(_safe(r.take(_bounded(plen)), root_ok=True), mode)
        return -1
    if tag == b"L":
        plen, tlen = LINK.unpack(r.take(LINK.size))
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


def _bounded(n: int) -> int:
    if n > MAX_PATH:
        raise corrupt(f"a path of {n} bytes")
    return n


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
