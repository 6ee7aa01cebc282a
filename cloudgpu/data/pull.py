"""Instance-side pulls: list and sign here, download there, watch the progress.

The client lists the source (metadata only), signs one short-lived GET URL per object
and copies that manifest to the instance, where cloudgpu/remote/puller.py fetches the
objects directly onto its disk and prints progress lines, drawn here as the usual bar.
The client process never reads an object's bytes. URLs are valid for the staging window
(a floor plus the time the bytes take at a slow rate); when they run out mid-pull
(a huge dataset, a slow store) the client re-signs once and the puller resumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cloudgpu.data import instance, uri
from cloudgpu.data.objects import RemoteObject, Store
from cloudgpu.data.select import Selector
from cloudgpu.data.stores import open_store
from cloudgpu.errors import NotFoundError
from cloudgpu.remote import Machine, ProgressFn, scripts
from cloudgpu.remote import objwire as script

PULLER_SOURCE = scripts.source("puller")
MIN_TTL_S = 900
MAX_TTL_S = 12 * 3600
SLOW_BYTES_PER_S = 20e6  # the staging window assumes at least this rate
DEFAULT_WORKERS = 32
# The smallest part a large object is split into (and the uploads' part size).
DEFAULT_PART_SIZE = 8 << 20
MAX_PART_SIZE = 256 << 20  # a killed pull loses at most this much per object


def pull_part_size(listing_bytes: int, workers: int) -> int:
    """Split large objects only as far as it takes to keep every worker busy: a store
    serves each stream at a limited rate, so a few huge objects need ranged parts, but
    when the data is already many objects each extra part is one more request (and
    on some servers, e.g. moto, each range reads the whole object again). So: the
    total over the workers, in MiB, between DEFAULT_PART_SIZE and MAX_PART_SIZE."""
    share = -(-listing_bytes // max(1, workers))
    mib = -(-share // (1 << 20)) * (1 << 20)
    return max(DEFAULT_PART_SIZE, min(MAX_PART_SIZE, mib))


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
    ca_pem: str | None = None,
) -> dict[str, Any]:
    return {
        "version": 1,
        "ca_pem": ca_pem,
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


def run_puller(
    machine: Machine,
    man: dict[str, Any],
    progress: ProgressFn | None,
    remote_dir: str,
) -> tuple[int, dict[str, Any], str]:
    """Copy the manifest over and run the puller; (exit status, last event, stderr)."""
    path = instance.put_manifest(machine, man, remote_dir)
    return instance.run(machine, PULLER_SOURCE, ["pull", path], instance.progress_events(progress))


def pull(
    machine: Machine,
    listing: Listing,
    store: Store,
    dest: str,
    *,
    progress: ProgressFn | None = None,
    workers: int = DEFAULT_WORKERS,
    part_size: int | None = None,
    ca_pem: str | None = None,
    clock: Callable[[], float] = time.time,
) -> PullStats:
    """Fetch ``listing`` onto ``machine`` at ``dest`` (an instance path); raise a clear
    error (expired URL, access denied, integrity...) when it fails."""
    state_dir = instance.state_dir(machine)
    if part_size is None:
        part_size = pull_part_size(listing.bytes, workers)
    ttl = staging_ttl(listing.bytes)
    signed_at = clock()
    for attempt in range(2):
        urls = store.sign_get(listing.source, listing.objects, ttl)
        man = manifest(
            listing,
            urls,
            dest,
            state_dir,
            signed_at + ttl,
            workers=workers,
            part_size=part_size,
            ca_pem=ca_pem,
        )
        rc, last, err = run_puller(machine, man, progress, state_dir)
        if rc == 0 and last.get("ev") == "done":
            return _stats(last, listing)
        if rc == script.EXIT_EXPIRED and attempt == 0 and clock() - signed_at >= ttl * 0.9:
            signed_at = clock()  # the pull outlived its window: new URLs, resume the rest
            continue
        where = f"pulling {listing.source} on the instance"
        raise instance.failure(where, listing.source.scheme, rc, last, err, ttl)
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
