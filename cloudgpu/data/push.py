"""Instance-side uploads: outputs (and checkpoints) go from the instance to the store.

1. The instance scans the tree (cloudgpu/remote/pushscan.py ``scan``): path, size and MD5
   of every regular file, part MD5s of large ones. Read here as hostile input.
2. This machine lists the destination (metadata only) and leaves out every file the
   store already holds with the same size and checksum: syncs are incremental.
3. It signs, per file, the store's atomic way to write it (cloudgpu.data.stores:
   presigned PUT / multipart, V4 PUT / resumable session, SAS Put Blob / blocks), the
   signatures covering the scanned MD5s where the store allows, for the transfer window.
4. The instance uploads (``push``); its progress lines drive the bar.
5. This machine lists the destination again and checks each object's size and checksum
   against the scan: what the job wrote is what the store holds.

No object byte passes through here, and no credential goes to the instance.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudgpu.data import instance, uri
from cloudgpu.data.objects import Destination, LocalFile, RemoteObject
from cloudgpu.data.pull import DEFAULT_PART_SIZE, DEFAULT_WORKERS, staging_ttl
from cloudgpu.errors import NotFoundError, RemoteError
from cloudgpu.remote import Machine, MissingSource, ProgressFn, scripts
from cloudgpu.remote import objwire as wire
from cloudgpu.remote.pushscan import part_size_for

PUSHER_SOURCE = scripts.source("pusher")
MAX_FILES = 5_000_000
MAX_FILE_BYTES = 5 << 40  # 5 TiB: the largest object any of the three stores keeps
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
ROUNDS = 3  # uploads of files the job rewrote during the previous one


@dataclass
class PushStats:
    objects: int = 0  # uploaded this time
    bytes: int = 0
    skipped: int = 0  # already in the store with the same size and checksum
    skipped_bytes: int = 0
    resumed_bytes: int = 0  # of ``bytes``, parts a killed upload had already sent
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def bytes_per_s(self) -> float:
        return (self.bytes - self.resumed_bytes) / self.seconds if self.seconds > 0 else 0.0


def scan(
    machine: Machine,
    root: str,
    max_parts: int,
    *,
    part_size: int = DEFAULT_PART_SIZE,
    skip: tuple[str, ...] = (),
    progress: ProgressFn | None = None,
) -> tuple[list[LocalFile], list[str]]:
    """What ``root`` on the instance holds, checked line by line; (files, notes)."""
    spec = {
        "root": root,
        "state_dir": instance.state_dir(machine),
        "part_size": part_size,
        "max_parts": max_parts,
        # Our own state (indexes, partials, manifests) is never an output.
        "skip": [*skip, f"{machine.nvme_path.rstrip('/')}/.cloudgpu"],
    }
    files: list[LocalFile] = []
    bad: list[str] = []
    bar = instance.progress_events(progress)

    def event(ev: dict[str, Any]) -> None:
        if ev.get("ev") == "file" and len(files) < MAX_FILES:
            f = parse_file(ev.get("f"), part_size, max_parts)
            if f is None:
                bad.append(str(ev.get("f"))[:200])
            else:
                files.append(f)
        else:
            bar(ev)

    rc, last, err = instance.run(machine, PUSHER_SOURCE, ["scan", json.dumps(spec)], event)
    if rc == wire.EXIT_NOTFOUND:
        raise MissingSource(f"{root}: not on the instance")
    if rc != 0 or last.get("ev") != "scanned":
        raise instance.failure(f"scanning {root} on the instance", "instance", rc, last, err, 0)
    if bad:
        raise RemoteError(f"scanning {root}: the instance sent {len(bad)} malformed line(s)")
    if len(files) != last.get("files"):
        raise RemoteError(
            f"scanning {root}: {last.get('files')} files announced, {len(files)} read"
        )
    notes = [str(n)[:300] for n in last.get("notes", []) if isinstance(n, str)][:20]
    return files, notes


def parse_file(raw: Any, base: int, max_parts: int) -> LocalFile | None:
    """One scan line as a LocalFile, or None when any field is not what it must be."""
    if not isinstance(raw, list) or len(raw) != 6:
        return None
    rel, size, mtime, md5, psize, parts = raw
    if not (
        isinstance(rel, str)
        and uri.safe_rel(rel)
        and isinstance(size, int)
        and 0 <= size <= MAX_FILE_BYTES
        and isinstance(mtime, int | float)
        and math.isfinite(mtime)
        and isinstance(md5, str)
        and _HEX32.match(md5)
        and psize == part_size_for(size, base, max_parts)
        and isinstance(parts, list)
        and all(isinstance(p, str) and _HEX32.match(p) for p in parts)
        and len(parts) == (-(-size // psize) if size > psize else 0)
    ):
        return None
    return LocalFile(rel, size, float(mtime), md5, psize, tuple(parts))


def existing(store: Destination, dest: uri.Source) -> dict[str, RemoteObject]:
    """What the destination holds now, by relative path ({} when nothing)."""
    try:
        return {o.rel: o for o in store.list_objects(dest)}
    except NotFoundError:
        return {}


def push(
    machine: Machine,
    root: str,
    dest: uri.Source,
    store: Destination,
    *,
    progress: ProgressFn | None = None,
    hashing: ProgressFn | None = None,
    workers: int = DEFAULT_WORKERS,
    part_size: int = DEFAULT_PART_SIZE,
    skip: tuple[str, ...] = (),
    ca_pem: str | None = None,
    clock: Callable[[], float] = time.time,
) -> PushStats:
    """Upload the instance's ``root`` tree to ``dest``; raise a clear error (expired URL,
    access denied, integrity...) when it fails. Objects the store already holds with the
    same size and checksum are not sent; nothing in the store is deleted. A file the job
    rewrites while it is being sent (a checkpoint synced mid-write) is scanned and sent
    again, up to ROUNDS times; then the store keeps its previous version (a note says so)."""
    stats = PushStats()
    changed: list[str] = []
    for round_ in range(ROUNDS):
        files, notes = scan(
            machine, root, store.max_parts, part_size=part_size, skip=skip, progress=hashing
        )
        held = existing(store, dest)
        send = [f for f in files if not (f.rel in held and f.matches(held[f.rel]))]
        if round_ == 0:
            stats.notes = notes
            stats.skipped = len(files) - len(send)
            stats.skipped_bytes = sum(f.size for f in files) - sum(f.size for f in send)
        if not send:
            changed = []
            break
        last = _upload(machine, root, dest, store, send, progress, workers, ca_pem, clock)
        changed = [c for c in last.get("changed", []) if isinstance(c, str)]
        sent = [f for f in send if f.rel not in set(changed)]
        verify(store, dest, sent)
        stats.objects += len(sent)
        stats.bytes += sum(f.size for f in sent)
        stats.resumed_bytes += int(last.get("resumed_bytes", 0))
        stats.seconds += float(last.get("seconds", 0.0))
        if not changed:
            break
    if changed:
        stats.notes.append(
            f"{len(changed)} file(s) kept changing while being uploaded (e.g. {changed[0]}): "
            "the store keeps its previous version of them"
        )
    return stats


def _upload(
    machine: Machine,
    root: str,
    dest: uri.Source,
    store: Destination,
    send: list[LocalFile],
    progress: ProgressFn | None,
    workers: int,
    ca_pem: str | None,
    clock: Callable[[], float],
) -> dict[str, Any]:
    """Sign and run one upload of ``send``; the pusher's final event."""
    ttl = staging_ttl(sum(f.size for f in send))
    signed_at = clock()
    where = f"uploading {root} to {dest} from the instance"
    for attempt in range(2):
        man = manifest(machine, root, send, store.sign_put(dest, send, ttl), signed_at + ttl)
        man["workers"], man["ca_pem"] = workers, ca_pem
        rc, last, err = run_pusher(machine, man, progress)
        if rc == 0 and last.get("ev") == "done":
            return last
        if rc == wire.EXIT_EXPIRED and attempt == 0 and clock() - signed_at >= ttl * 0.9:
            signed_at = clock()  # it outlived its window: sign again, the parts sent stay
            continue
        raise instance.failure(where, dest.scheme, rc, last, err, ttl)
    raise AssertionError("unreachable")


def manifest(
    machine: Machine,
    root: str,
    files: list[LocalFile],
    plans: list[dict[str, Any]],
    expires_at: float,
) -> dict[str, Any]:
    objects = []
    for f, plan in zip(files, plans, strict=True):
        objects.append(
            {**plan, "rel": f.rel, "size": f.size, "md5": f.md5, "part_size": f.part_size}
        )
    return {
        "version": 1,
        "root": root,
        "state_dir": instance.state_dir(machine),
        "expires_at": expires_at,
        "objects": objects,
    }


def run_pusher(
    machine: Machine, man: Mapping[str, Any], progress: ProgressFn | None
) -> tuple[int, dict[str, Any], str]:
    path = instance.put_manifest(machine, man, instance.state_dir(machine))
    return instance.run(machine, PUSHER_SOURCE, ["push", path], instance.progress_events(progress))


def verify(store: Destination, dest: uri.Source, sent: list[LocalFile]) -> None:
    """The store holds every file sent with its size and checksum (a listing: no read)."""
    held = existing(store, dest)
    wrong = [f.rel for f in sent if f.rel not in held or not _same(f, held[f.rel])]
    if wrong:
        raise RemoteError(
            f"{dest}: {len(wrong)} object(s) not as uploaded after the upload, e.g. {wrong[0]}",
            hint="upload again (unchanged objects are skipped)",
        )


def _same(f: LocalFile, obj: RemoteObject) -> bool:
    """As LocalFile.matches, but a store without a checksum for the object (SSE-KMS S3
    ETags) is taken at its size: there is nothing else to compare."""
    return f.matches(obj) or (obj.size == f.size and not obj.check)
