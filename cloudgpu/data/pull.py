"""Instance-side pulls: list and sign here, download there, watch the progress.

The client lists the source (metadata only), signs one short-lived GET URL per object
and copies that manifest to the instance, where cloudgpu/remote/puller.py fetches the
objects directly onto its disk and prints progress lines, drawn here as the usual bar.
The client process never reads an object's bytes. URLs are valid for the staging window
(a floor plus the time the bytes take at a slow rate); when they run out mid-pull
(a huge dataset, a slow store) the client re-signs once and the puller resumes.
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudgpu.data import uri
from cloudgpu.data.objects import RemoteObject, Store
from cloudgpu.data.select import Selector
from cloudgpu.data.stores import open_store
from cloudgpu.errors import AuthError, NotFoundError, RemoteError
from cloudgpu.remote import Machine, ProgressFn
from cloudgpu.remote import puller as script

PULLER_SOURCE = Path(script.__file__).read_text(encoding="utf-8")
MIN_TTL_S = 900
MAX_TTL_S = 12 * 3600
SLOW_BYTES_PER_S = 20e6  # the staging window assumes at least this rate
DEFAULT_WORKERS = 32
# Small parts: more streams per large object (a store serves each stream at a limited rate).
DEFAULT_PART_SIZE = 8 << 20
STATE_DIR = ".cloudgpu/pull"  # under the instance's NVMe: partials' index, manifests
MAX_LINE = 1 << 16


@dataclass
class Listing:
    """What a source holds after excludes: the objects to fetch and the notes."""

    source: uri.Source
    objects: list[RemoteObject]
    excluded: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


@dataclass
class PullStats:
    objects: int = 0  # fetched this time
    bytes: int = 0
    skipped: int = 0  # already present and unchanged
    skipped_bytes: int = 0
    resumed_bytes: int = 0  # of ``bytes``, already on disk from an interrupted pull
    seconds: float = 0.0
    listed: int = 0
    excluded: int = 0

    @property
    def objects_per_s(self) -> float:
        return self.objects / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return (self.bytes - self.resumed_bytes) / self.seconds if self.seconds > 0 else 0.0


def list_source(src_text: str, selector: Selector, env: Mapping[str, str]) -> Listing:
    """List ``src_text`` and apply ``selector``; unsafe object names are left out with a
    note (a key like ``../x`` must not decide where a file lands)."""
    src = uri.parse(src_text)
    return list_source_with(src, open_store(src, env), selector)


def list_source_with(src: uri.Source, store: Store, selector: Selector) -> Listing:
    kept, excluded, unsafe = [], 0, []
    for obj in store.list_objects(src):
        if not uri.safe_rel(obj.rel):
            unsafe.append(obj.key)
        elif selector.excluded(obj.rel):
            excluded += 1
        else:
            kept.append(obj)
    notes = store.notes()
    if unsafe:
        notes.append(
            f"{len(unsafe)} object(s) skipped: names unsafe as file paths (e.g. {unsafe[0]!r})"
        )
    if not kept:
        raise NotFoundError(f"{src}: every object is excluded", provider=src.scheme)
    return Listing(src, kept, excluded, notes)


def staging_ttl(total_bytes: int) -> int:
    """Seconds the signed URLs stay valid: enough for the bytes at a slow rate."""
    return int(min(MAX_TTL_S, MIN_TTL_S + total_bytes / SLOW_BYTES_PER_S))


def manifest(
    listing: Listing,
    urls: Sequence[str],
    dest: str,
    state_dir: str,
    expires_at: float,
    *,
    workers: int = DEFAULT_WORKERS,
    part_size: int = DEFAULT_PART_SIZE,
) -> dict[str, Any]:
    return {
        "version": 1,
        "dest": dest,
        "state_dir": state_dir,
        "workers": workers,
        "part_size": part_size,
        "expires_at": expires_at,
        "objects": [
            {
                "rel": o.rel,
                "size": o.size,
                "id": o.id,
                "check": dict(o.check),
                "mtime": o.mtime,
                "url": u,
            }
            for o, u in zip(listing.objects, urls, strict=True)
        ],
    }


def puller_command(python: str, manifest_path: str) -> str:
    """The shell command running the puller on the instance (system python3 preferred,
    as for the sync agent: version-manager shims cost a start-up each)."""
    args = f"-c {shlex.quote(PULLER_SOURCE)} pull {shlex.quote(manifest_path)}"
    if python != "python3":
        return f"{python} {args}"
    return f'P=python3; [ -x /usr/bin/python3 ] && P=/usr/bin/python3; exec "$P" {args}'


class _Lines:
    """Splits the puller's stdout into JSON events (bounded: hostile bytes are dropped)."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.buf = b""
        self.on_event = on_event
        self.last: dict[str, Any] = {}

    def feed(self, data: bytes) -> None:
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                self.last = ev
                self.on_event(ev)
        if len(self.buf) > MAX_LINE:
            self.buf = b""


def run_puller(
    machine: Machine,
    man: dict[str, Any],
    progress: ProgressFn | None,
    remote_dir: str,
) -> tuple[int, dict[str, Any], str]:
    """Copy the manifest over and run the puller; (exit status, last event, stderr)."""
    name = f"manifest-{secrets.token_hex(8)}.json.gz"
    with tempfile.TemporaryDirectory(prefix="cloudgpu-pull-") as tmp:
        local = Path(tmp, name)
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(json.dumps(man).encode(), compresslevel=3))
        machine.put_file(local, f"{remote_dir}/{name}")

    def event(ev: dict[str, Any]) -> None:
        if progress is not None and ev.get("ev") in ("progress", "done"):
            progress(int(ev.get("done", 0)), int(ev.get("total", 0)))

    lines = _Lines(event)
    err: list[bytes] = []
    rc = machine.run(
        puller_command(getattr(machine, "python", "python3"), f"{remote_dir}/{name}"),
        on_stdout=lines.feed,
        on_stderr=lambda b: err.append(b) if sum(map(len, err)) < MAX_LINE else None,
    )
    return rc, lines.last, b"".join(err).decode(errors="replace")


def pull(
    machine: Machine,
    listing: Listing,
    store: Store,
    dest: str,
    *,
    progress: ProgressFn | None = None,
    workers: int = DEFAULT_WORKERS,
    part_size: int = DEFAULT_PART_SIZE,
    clock: Callable[[], float] = time.time,
) -> PullStats:
    """Fetch ``listing`` onto ``machine`` at ``dest`` (an instance path); raise a clear
    error (expired URL, access denied, integrity...) when it fails."""
    nvme = machine.nvme_path.rstrip("/")
    state_dir = f"{nvme}/{STATE_DIR}"
    ttl = staging_ttl(listing.bytes)
    signed_at = clock()
    for attempt in range(2):
        urls = store.sign_get(listing.source, listing.objects, ttl)
        man = manifest(
            listing, urls, dest, state_dir, signed_at + ttl, workers=workers, part_size=part_size
        )
        rc, last, err = run_puller(machine, man, progress, state_dir)
        if rc == 0 and last.get("ev") == "done":
            return _stats(last, listing)
        if rc == script.EXIT_EXPIRED and attempt == 0 and clock() - signed_at >= ttl * 0.9:
            signed_at = clock()  # the pull outlived its window: new URLs, resume the rest
            continue
        raise _failure(listing.source, rc, last, err, ttl)
    raise AssertionError("unreachable")


def _stats(ev: Mapping[str, Any], listing: Listing) -> PullStats:
    return PullStats(
        objects=int(ev.get("objects_done", 0)),
        bytes=int(ev.get("total", 0)),
        skipped=int(ev.get("skipped", 0)),
        skipped_bytes=int(ev.get("skipped_bytes", 0)),
        resumed_bytes=int(ev.get("resumed_bytes", 0)),
        seconds=float(ev.get("seconds", 0.0)),
        listed=len(listing.objects),
        excluded=listing.excluded,
    )


def _failure(src: uri.Source, rc: int, last: Mapping[str, Any], err: str, ttl: int) -> Exception:
    msg = str(last.get("message") or (err.strip().splitlines() or [f"exit status {rc}"])[-1])
    where = f"pulling {src} on the instance"
    if rc == script.EXIT_EXPIRED:
        return AuthError(
            f"{where}: {msg}",
            provider=src.scheme,
            hint=f"the URLs were signed for {ttl} s; check the instance's clock, then relaunch "
            "(the pull resumes where it stopped)",
        )
    if rc == script.EXIT_AUTH:
        return AuthError(
            f"{where}: {msg}",
            provider=src.scheme,
            hint="the signing credentials must be allowed to read these objects",
        )
    if rc == script.EXIT_NOTFOUND:
        return NotFoundError(f"{where}: {msg}", provider=src.scheme)
    if rc == 127:
        return RemoteError(f"{where}: python3 is missing on the instance")
    hint = "relaunch: the pull resumes where it stopped" if rc != script.EXIT_USAGE else None
    return RemoteError(f"{where}: {msg}", hint=hint)
