"""Tree and file transfer as a plain tar stream, for machines that have only ``sh`` and
``tar`` (a container of any image, reached through an exec API rather than SSH).

The remote side runs ``tar -x``/``tar -c``: no python3, no agent, nothing installed.
Tar's own header checksums and the transport's (TLS/TCP) are the integrity checks; there
is no skip-unchanged (the sync agent's manifests need python on the remote end), which
costs nothing where this is used: a fresh container's empty scratch volume.

The local end of a get is as careful as the sync agent's receiver: every path is walked
from the destination with O_NOFOLLOW (cloudgpu.remote.syncdest.Dest), absolute and ``..``
paths are refused, links are recreated as links and never followed, hard links and
device/FIFO entries are skipped, and files are renamed into place only after the whole
stream arrived and the remote tar exited 0. The transport is passed in
(cloudgpu.remote.transfer.Stream), as for the sync agent.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import tarfile
import time
from pathlib import Path
from typing import IO, cast

from cloudgpu.errors import RemoteError
from cloudgpu.remote import syncdest, syncwire
from cloudgpu.remote.machine import ExcludeFn, ProgressFn, TransferStats
from cloudgpu.remote.transfer import OpenStream, Stream, put_failed

BLOCK = 1 << 20


class _Out:
    """A write-only file over a stream's stdin, counting file bytes for progress."""

    def __init__(self, s: Stream) -> None:
        self.s = s

    def write(self, data: bytes) -> int:
        self.s.write(bytes(data))
        return len(data)


class _In:
    """A read-only file over a stream's stdout."""

    def __init__(self, s: Stream) -> None:
        self.s = s
        self.buf = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self.buf) < n:
            more = self.s.read(BLOCK)
            if not more:
                break
            self.buf += more
        out, self.buf = (self.buf, b"") if n < 0 else (self.buf[:n], self.buf[n:])
        return out


def _fail(op: str, remote: str, status: int, err: str) -> RemoteError:
    line = err.strip().splitlines()[-1] if err.strip() else f"exit status {status}"
    return RemoteError(f"{op} {remote}: {line}")


def _left_out(exclude: ExcludeFn, top: str, rel: str, name: str) -> bool:
    full = os.path.join(top, name)
    is_dir = os.path.isdir(full) and not os.path.islink(full)
    return exclude(posixpath.normpath(posixpath.join(rel, name)), is_dir)


def _entries(local: Path, exclude: ExcludeFn | None = None) -> list[tuple[Path, str]]:
    """(path, name in the archive) for the tree, parents before children, no link
    followed, nothing ``exclude`` names (nor under it); the root itself is ``.``."""
    if not local.is_dir():
        return [(local, "")]
    out: list[tuple[Path, str]] = [(local, ".")]
    for top, dirs, files in os.walk(local):
        rel = os.path.relpath(top, local)
        if exclude is not None:
            dirs[:] = [d for d in dirs if not _left_out(exclude, top, rel, d)]
            files = [f for f in files if not _left_out(exclude, top, rel, f)]
        dirs.sort()
        for name in [*sorted(files), *[d for d in dirs if os.path.islink(os.path.join(top, d))]]:
            out.append((Path(top, name), posixpath.normpath(posixpath.join(rel, name))))
        for name in dirs:
            if not os.path.islink(os.path.join(top, name)):
                out.append((Path(top, name), posixpath.normpath(posixpath.join(rel, name))))
    return out


def put(
    open_stream: OpenStream,
    local: Path,
    remote: str,
    progress: ProgressFn | None,
    exclude: ExcludeFn | None = None,
) -> TransferStats:
    """Send the file or tree ``local`` to the path ``remote`` (created), less what
    ``exclude`` names."""
    t0 = time.perf_counter()
    if not os.path.lexists(local):
        raise RemoteError(f"{local}: no such file or directory")
    single = not local.is_dir()
    where = posixpath.dirname(remote.rstrip("/")) if single else remote
    entries = _entries(local, exclude)
    total = sum(p.lstat().st_size for p, _ in entries if p.is_file() and not p.is_symlink())
    d = shlex.quote(where or ".")
    s = open_stream(f"mkdir -p {d} && exec tar -x -o -f - -C {d}")
    stats = TransferStats()
    try:
        with tarfile.open(
            fileobj=cast(IO[bytes], _Out(s)), mode="w|", format=tarfile.PAX_FORMAT
        ) as tar:
            for path, name in entries:
                arc = posixpath.basename(remote.rstrip("/")) if single else name
                info = tar.gettarinfo(str(path), arcname=arc)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                    stats.files_sent += 1
                    stats.bytes_sent += info.size
                    if progress:
                        progress(stats.bytes_sent, total)
                elif info.isdir() or info.issym():
                    tar.addfile(info)
    except OSError as exc:
        raise put_failed(s, local, remote, exc, _fail) from exc
    s.close_write()
    while s.read(BLOCK):
        pass
    status, err = s.finish()
    if status != 0:
        raise _fail("put", remote, status, err)
    stats.seconds = time.perf_counter() - t0
    return stats


def get(
    open_stream: OpenStream, remote: str, local: Path, progress: ProgressFn | None
) -> TransferStats:
    """Fetch the file or tree ``remote`` into ``local`` (a file's path, or a directory)."""
    t0 = time.perf_counter()
    path = remote.rstrip("/") or "/"
    q = shlex.quote
    parent, base = q(posixpath.dirname(path) or "/"), q(posixpath.basename(path))
    s = open_stream(
        f"if [ -d {q(path)} ]; then cd {q(path)} && exec tar -c -f - .; "
        f"else cd {parent} && exec tar -c -f - {base}; fi"
    )
    dest = syncdest.Dest(os.fsencode(local))
    stats = TransferStats()
    try:
        try:
            _unpack(s, dest, stats, progress)
        except (tarfile.TarError, syncwire.SyncError, OSError) as exc:
            while s.read(BLOCK):  # let the remote tar finish writing, then hear why
                pass
            status, err = s.finish()
            if status != 0:
                raise _fail("get", remote, status, err) from exc
            raise RemoteError(f"get {remote} -> {local}: {_why(exc)}") from exc
        status, err = s.finish()
        if status != 0:
            raise _fail("get", remote, status, err)
        try:
            dest.commit()
        except OSError as exc:
            raise RemoteError(f"get {remote} -> {local}: {_why(exc)}") from exc
    finally:
        dest.close()  # removes whatever was not committed
    stats.seconds = time.perf_counter() - t0
    return stats


def _unpack(
    s: Stream, dest: syncdest.Dest, stats: TransferStats, progress: ProgressFn | None
) -> None:
    with tarfile.open(fileobj=cast(IO[bytes], _In(s)), mode="r|") as tar:
        single: bool | None = None
        for member in tar:
            if single is None:  # `tar -c .` names a tree "./..."; a file is its own name
                single = not (member.name == "." or member.name.startswith("./"))
            _receive(dest, tar, member, stats, single)
            if progress and member.isreg():
                progress(stats.bytes_sent, stats.bytes_sent)


def _why(exc: BaseException) -> str:
    if isinstance(exc, tarfile.TarError):
        return f"not a valid tar stream ({exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _name(member: tarfile.TarInfo, single: bool) -> bytes:
    """The member's path below the destination; refuses anything that could leave it."""
    name = member.name
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    if name in ("", "."):
        return b""
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") or len(p) > 255 for p in parts):
        raise syncwire.SyncError(f"refusing unsafe path {member.name!r}", syncwire.EXIT_INTEGRITY)
    if "\0" in name or len(name) > syncdest.MAX_PATH:
        raise syncwire.SyncError(f"refusing unsafe path {member.name!r}", syncwire.EXIT_INTEGRITY)
    # A single file arrives under its own name: it becomes the destination itself.
    return b"" if single else os.fsencode(name)


def _receive(
    dest: syncdest.Dest,
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    stats: TransferStats,
    single: bool,
) -> None:
    if single and not member.isreg():
        raise syncwire.SyncError(f"{member.name}: not a regular file", syncwire.EXIT_INTEGRITY)
    path = _name(member, single)
    if member.isdir():
        dest.directory(path, member.mode)
        return
    if not (member.isreg() or member.issym()):
        stats.files_skipped += 1  # hard links, devices, FIFOs: never recreated
        return
    fd_dir, name, parts = dest.parent(path)
    tmp = dest.temp(fd_dir, name, parts)
    if member.issym():
        target = member.linkname
        if not target or "\0" in target:
            raise syncwire.SyncError(f"bad link target {target!r}", syncwire.EXIT_INTEGRITY)
        os.symlink(target, tmp, dir_fd=fd_dir)  # recreated as a link, never followed
        dest.pending.append((parts, tmp, name))
        return
    src = tar.extractfile(member)
    assert src is not None
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd_dir)
    dest.pending.append((parts, tmp, name))
    try:
        while block := src.read(BLOCK):
            syncwire.write_all(fd, block)
        os.fchmod(fd, member.mode & 0o777)  # never setuid/setgid from a stream
        os.utime(fd, (member.mtime, member.mtime))
    finally:
        os.close(fd)
    stats.files_sent += 1
    stats.bytes_sent += member.size
