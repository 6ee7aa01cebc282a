"""Tree and file transfer over any byte stream to a remote command (one stream per sync).

put: one exec of the agent, which first sends its manifest; we diff locally and send
only what changed as one stream, whose SHA-256 the agent verifies before reporting.
get: send our manifest to the agent, which streams back only what differs.

The stream transport is passed in (:class:`Stream` factory), so the same code runs over
a paramiko channel or the system ``ssh`` binary. Nothing here knows hosts or keys.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from cloudgpu.errors import RemoteError
from cloudgpu.remote import scripts, syncdest, syncwire
from cloudgpu.remote.machine import (
    ConnectionLost,
    ExcludeFn,
    MissingSource,
    ProgressFn,
    TransferStats,
    byte_paths,
)

AGENT_SOURCE = scripts.source("agent")


class Stream(Protocol):
    """A running remote command: its stdin, stdout, and finally status and stderr."""

    def write(self, data: bytes) -> None: ...

    def read(self, n: int) -> bytes: ...  # b"" at end of output

    def close_write(self) -> None: ...

    def finish(self) -> tuple[int, str]: ...  # exit status, stderr text


OpenStream = Callable[[str], Stream]


def agent_command(python: str, op: str, root: str) -> str:
    """The shell command running the agent's ``op`` on ``root`` with ``python``.

    For the default ``python3`` the system's own interpreter is preferred when present:
    version-manager shims on PATH (pyenv) cost a noticeable start-up per sync.
    """
    args = f"-c {shlex.quote(AGENT_SOURCE)} {op} {shlex.quote(root)}"
    if python != "python3":
        return f"{python} {args}"
    return f'P=python3; [ -x /usr/bin/python3 ] && P=/usr/bin/python3; exec "$P" {args}'


class TransportFailed(ConnectionLost):
    """The stream's transport itself failed (the ssh binary's own status 255), not the
    agent: the caller may retry over another transport."""


FailFn = Callable[[str, str, int, str], RemoteError]  # (op, remote, status, stderr)


def _fail(op: str, remote: str, status: int, err: str) -> RemoteError:
    line = err.strip().splitlines()[-1] if err.strip() else f"exit status {status}"
    if status < 0 and not err.strip():  # paramiko's -1: the channel died without one
        line = "the connection was lost before the transfer ended"
    if status == 255:  # the agent never exits 255; ssh does when it cannot connect
        return TransportFailed(f"{op} {remote}: ssh failed ({line})")
    if status == syncwire.EXIT_MISSING:
        return MissingSource(f"{op} {remote}: {line}")
    if status == 127:
        return RemoteError(
            f"{op} {remote}: python3 is missing on the instance ({line})",
            hint="the sync agent needs python3 on the remote machine",
        )
    if status == syncwire.EXIT_INTEGRITY:
        return RemoteError(f"{op} {remote}: {line}", hint="run the sync again; it resends")
    return RemoteError(f"{op} {remote}: {line}")


def put_failed(
    s: Stream, local: Path, remote: str, exc: OSError, fail: FailFn = _fail
) -> RemoteError:
    """Reading ``local`` or writing the stream failed mid-put: the stream is ended, and
    the remote end's own reason wins when it failed first (disk full...)."""
    s.close_write()
    status, err = s.finish()
    if status != 0:
        return fail("put", remote, status, err)
    return RemoteError(f"put {local}: {exc.strerror or exc}")


def _read_all(s: Stream) -> bytes:
    parts = []
    while block := s.read(1 << 20):
        parts.append(block)
    return b"".join(parts)


def put(
    open_stream: OpenStream,
    python: str,
    local: Path,
    remote: str,
    progress: ProgressFn | None,
    exclude: ExcludeFn | None = None,
    streams: int = 1,
) -> TransferStats:
    """Send the file or tree ``local`` to ``remote``, skipping unchanged files and what
    ``exclude`` names. With ``streams`` > 1 (``pack: true``) the files are split into
    that many shards of about equal bytes, each sent as its own stream to its own agent
    on the instance, so the unpacking there runs in parallel; every agent keeps its
    guarantees (verified stream, nothing written through a link, rename at the end)."""
    t0 = time.perf_counter()
    root = os.fsencode(local)
    if not os.path.lexists(root):
        raise RemoteError(f"{local}: no such file or directory")
    # Start the remote listings first: they run while we list our side.
    opened = [open_stream(agent_command(python, "recv", remote)) for _ in range(max(1, streams))]
    try:
        mine = syncwire.scan(root, byte_paths(exclude))
    except OSError as exc:
        _end(opened)
        raise RemoteError(f"put {local}: {exc.strerror or exc}") from exc
    # Every agent sends the listing first (read them all: one left unread would block);
    # they list the same tree, so the first is the one to diff against.
    theirs = _listings(opened, remote)[0]
    paths = syncwire.changed(mine, theirs)
    skip_files, skip_bytes = syncwire.skipped(mine, paths)
    total = sum(mine[p][1] for p in paths)
    advanced = _Progress(progress, total)
    shards = _shards(paths, mine, theirs, len(opened))
    if len(opened) == 1:
        _send(opened[0], root, mine, shards[0], local, remote, advanced)
    else:
        with ThreadPoolExecutor(len(opened), thread_name_prefix="cloudgpu-pack") as pool:
            jobs = [
                pool.submit(_send, s, root, mine, shard, local, remote, advanced)
                for s, shard in zip(opened, shards, strict=True)
            ]
            for j in jobs:
                j.result()
    return TransferStats(
        files_sent=sum(1 for p in paths if mine[p][0] == b"f"),
        bytes_sent=total,
        files_skipped=skip_files,
        bytes_skipped=skip_bytes,
        seconds=time.perf_counter() - t0,
    )


class _Progress:
    """Bytes sent so far over every stream of one put, reported as they add up."""

    def __init__(self, progress: ProgressFn | None, total: int) -> None:
        self.progress, self.total = progress, total
        self.done = 0
        self.lock = threading.Lock()

    def __call__(self, n: int) -> None:
        with self.lock:
            self.done += n
            now = self.done
        if self.progress:
            self.progress(now, self.total)


def _shards(
    paths: list[bytes],
    mine: syncwire.Manifest,
    theirs: dict[bytes, tuple[bytes, int, int]],
    n: int,
) -> list[list[bytes]]:
    """``paths`` split over ``n`` streams. A link there that becomes a directory is
    replaced by the stream that makes it; the others would meet the link meanwhile and
    refuse it: such a sync goes as one stream."""
    if any(mine[p][0] == b"d" and theirs.get(p, (b"",))[0] == b"l" for p in paths):
        return [paths] + [[] for _ in range(n - 1)]
    return split(paths, mine, n)


def split(paths: list[bytes], mine: syncwire.Manifest, n: int) -> list[list[bytes]]:
    """``paths`` in ``n`` shards of about equal bytes, in their order; directories and
    links in the first (a file's directory is made by whichever stream needs it first)."""
    shards: list[list[bytes]] = [[] for _ in range(n)]
    load = [0] * n
    for p in paths:
        kind, size = mine[p][0], mine[p][1]
        i = 0 if kind != b"f" else min(range(n), key=load.__getitem__)
        shards[i].append(p)
        load[i] += size + 512  # a file costs the receiver something even when empty
    return shards


def _send(
    s: Stream,
    root: bytes,
    mine: syncwire.Manifest,
    paths: list[bytes],
    local: Path,
    remote: str,
    advanced: Callable[[int], None],
) -> None:
    """One stream: pack ``paths``, then check what the agent says it received."""
    total = sum(mine[p][1] for p in paths)
    try:
        syncwire.pack(root, mine, paths, syncwire.Writer(s.write, advanced))
    except syncwire.SyncError as exc:
        s.close_write()
        s.finish()
        raise RemoteError(f"put {local}: {exc}") from exc
    except OSError as exc:
        raise put_failed(s, local, remote, exc) from exc
    s.close_write()
    out = _read_all(s)
    status, err = s.finish()
    if status != 0:
        raise _fail("put", remote, status, err)
    try:
        got = json.loads(out.decode())
    except ValueError:
        got = {}
    if got.get("bytes") != total:
        raise RemoteError(
            f"put {remote}: the instance received {got.get('bytes')} of {total} bytes"
        )


def _listings(opened: list[Stream], remote: str) -> list[dict[bytes, tuple[bytes, int, int]]]:
    """Every agent's listing; if one fails, the others are ended before its error."""
    out = []
    for i, s in enumerate(opened):
        try:
            out.append(_peer_manifest(s, remote))
        except BaseException:
            _end(opened[:i] + opened[i + 1 :])
            raise
    return out


def _end(streams: list[Stream]) -> None:
    """End streams whose transfer will not happen (their agents exit on end of input)."""
    for s in streams:
        s.close_write()
        s.finish()


def _peer_manifest(s: Stream, remote: str) -> dict[bytes, tuple[bytes, int, int]]:
    """The manifest the ``recv`` agent sends first; its failure reason if it fails."""
    r = syncwire.Reader(s.read)
    try:
        manifest = syncwire.read_manifest(r)
    except syncwire.SyncError as exc:
        s.close_write()
        status, err = s.finish()
        if status == 0 or status == syncwire.EXIT_INTEGRITY:
            raise RemoteError(f"put {remote}: {exc}") from exc
        raise _fail("put", remote, status, err) from exc
    if r.pos != len(r.buf):
        raise RemoteError(f"put {remote}: unexpected output from the sync agent")
    return manifest


def get(
    open_stream: OpenStream, python: str, remote: str, local: Path, progress: ProgressFn | None
) -> TransferStats:
    """Fetch the file or tree ``remote`` into ``local``, skipping unchanged files."""
    t0 = time.perf_counter()
    root = os.fsencode(local)
    manifest = syncwire.encode_manifest(syncwire.scan(root))
    s = open_stream(agent_command(python, "send", remote))
    s.write(syncwire.LENGTH.pack(len(manifest)) + manifest)
    s.close_write()
    try:
        got = syncdest.unpack(root, syncwire.Reader(s.read), progress)
    except syncwire.SyncError as exc:
        status, err = s.finish()
        if status != 0:
            raise _fail("get", remote, status, err) from exc
        raise RemoteError(f"get {remote}: {exc}") from exc
    except OSError as exc:
        s.finish()
        raise RemoteError(f"get {remote} -> {local}: {exc.strerror or exc}") from exc
    status, err = s.finish()
    if status != 0:
        raise _fail("get", remote, status, err)
    return TransferStats(
        files_sent=got["files"],
        bytes_sent=got["bytes"],
        files_skipped=got["skipped_files"],
        bytes_skipped=got["skipped_bytes"],
        seconds=time.perf_counter() - t0,
    )
