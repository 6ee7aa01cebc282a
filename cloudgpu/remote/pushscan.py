"""The pusher's scan: the instance lists and hashes the tree it is about to upload.

Shipped with the pusher (cloudgpu.remote.scripts) and run with the instance's python3:
standard library only, plus cloudgpu.remote.objwire. ``scan`` walks the tree (no
symlink followed or sent, only regular files) and prints one line per file: its path,
size, mtime, MD5 and, for files above the part size, the MD5 of each part. An index
(size, mtime) per tree spares rehashing unchanged files at the next sync. Files are
opened below the root's fd with O_NOFOLLOW (:func:`open_under`), the upload's too.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cloudgpu.remote.objwire import (
    CHUNK,
    EXIT_IO,
    EXIT_NOTFOUND,
    EXIT_USAGE,
    Counters,
    Fail,
    emit,
    read_json,
    write_json,
)

HASHERS = 8


def part_size_for(size: int, base: int, max_parts: int) -> int:
    """The part size of a file: ``base``, grown in MiB steps to stay within ``max_parts``."""
    need = -(-size // max_parts)
    return max(base, -(-need // (1 << 20)) * (1 << 20))


def open_under(root_fd: int, rel: str) -> int:
    """Open ``rel`` below ``root_fd`` for reading, following no symlink on the way."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Fail(f"refusing path {rel!r}", EXIT_IO)
    fd = root_fd
    try:
        for p in parts[:-1]:
            nxt = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = nxt
        out = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        if fd != root_fd:
            os.close(fd)
    if not stat.S_ISREG(os.fstat(out).st_mode):
        os.close(out)
        raise Fail(f"{rel}: no longer a regular file", EXIT_IO)
    return out


def walk(root: str, skip: set[str]) -> tuple[list[tuple[str, os.stat_result]], list[str]]:
    """Regular files under ``root`` (relative path, lstat) and what was left out."""
    files: list[tuple[str, os.stat_result]] = []
    notes: list[str] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        where = os.path.join(root, rel_dir) if rel_dir else root
        try:
            entries = list(os.scandir(where))
        except OSError as exc:
            notes.append(f"{rel_dir or '.'}: cannot read ({exc.strerror})")
            continue
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            try:
                rel.encode("utf-8")
                st = e.stat(follow_symlinks=False)
            except (UnicodeEncodeError, OSError):
                notes.append(f"{rel!r}: name or entry unreadable, not sent")
                continue
            if stat.S_ISLNK(st.st_mode):
                notes.append(f"{rel}: a symlink, not sent")
            elif stat.S_ISDIR(st.st_mode):
                if os.path.join(root, rel) not in skip:
                    stack.append(rel)
            elif stat.S_ISREG(st.st_mode):
                files.append((rel, st))
            else:
                notes.append(f"{rel}: not a regular file, not sent")
    files.sort()
    return files, notes


def hash_file(root_fd: int, rel: str, psize: int) -> tuple[str, list[str]]:
    """MD5 of the whole file and, when it is larger than ``psize``, of each part."""
    fd = open_under(root_fd, rel)
    try:
        whole, parts, part, in_part = hashlib.md5(), [], hashlib.md5(), 0
        size = os.fstat(fd).st_size
        while block := os.read(fd, min(CHUNK * 8, psize - in_part)):
            whole.update(block)
            part.update(block)
            in_part += len(block)
            if in_part == psize:
                parts.append(part.hexdigest())
                part, in_part = hashlib.md5(), 0
        if in_part:
            parts.append(part.hexdigest())
        return whole.hexdigest(), parts if size > psize else []
    finally:
        os.close(fd)


def scan(spec: dict[str, Any]) -> dict[str, Any]:
    root = str(spec["root"]).rstrip("/") or "/"
    try:
        top = os.lstat(root)
    except FileNotFoundError:
        raise Fail(f"{root}: not on the instance", EXIT_NOTFOUND) from None
    if not stat.S_ISDIR(top.st_mode):
        raise Fail(f"{root}: not a directory", EXIT_USAGE)
    base, max_parts = int(spec["part_size"]), int(spec["max_parts"])
    os.makedirs(spec["state_dir"], exist_ok=True)
    key = hashlib.sha256(root.encode()).hexdigest()[:16]
    index_path = os.path.join(spec["state_dir"], f"push-index-{key}.json")
    old: dict[str, list[Any]] = read_json(index_path) or {}
    files, notes = walk(root, {str(s).rstrip("/") for s in spec.get("skip", ())})
    index: dict[str, list[Any]] = {}
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    n = Counters()
    n.total = sum(st.st_size for _, st in files)
    shown = [time.monotonic()]

    def one(item: tuple[str, os.stat_result]) -> None:
        rel, st = item
        psize = part_size_for(st.st_size, base, max_parts)
        seen = old.get(rel)
        if seen and seen[:3] == [st.st_size, st.st_mtime_ns, psize]:
            md5, parts = seen[3], seen[4]
        else:
            md5, parts = hash_file(root_fd, rel, psize)
        index[rel] = [st.st_size, st.st_mtime_ns, psize, md5, parts]
        emit({"ev": "file", "f": [rel, st.st_size, st.st_mtime, md5, psize, parts]})
        n.advance(st.st_size)
        with n.lock:
            due = time.monotonic() - shown[0] >= 0.25
            if due:
                shown[0] = time.monotonic()
        if due:
            emit(n.event())

    try:
        with ThreadPoolExecutor(HASHERS) as pool:
            for _ in pool.map(one, files):
                pass
    finally:
        os.close(root_fd)
    write_json(index_path, index)
    return {"ev": "scanned", "files": len(files), "bytes": n.total, "notes": notes[:20]}
