"""The instance-side object pusher: outputs and checkpoints uploaded by the instance itself.

Run with the instance's python3, standard library only (plus cloudgpu.remote.objwire
and cloudgpu.remote.pushscan, shipped with it by cloudgpu.remote.scripts). No cloud
credential is on the instance: the client signs one URL per object and operation, each
valid for the transfer window.

``scan SPEC`` (SPEC: JSON ``{"root", "state_dir", "part_size", "max_parts", "skip"}``)
walks the tree (no symlink followed or sent, only regular files) and prints one line per
file: its path, size, mtime, MD5 and, for files above the part size, the MD5 of each
part (cloudgpu.remote.pushscan). The client decides from these what to send (a file the
store already holds with the same size and checksum is skipped) and signs URLs that
carry those checksums, so a URL can store only the bytes that were scanned. An index
(size, mtime) per tree spares rehashing unchanged files at the next sync.

``push MANIFEST`` uploads, many objects at once, each in the store's own atomic way: a
single PUT (S3, GCS XML API, Azure Put Blob) up to the part size; above it S3 multipart
parts (completed last), Azure blocks (committed last with Put Block List) or a GCS
resumable session (finalized by its last chunk). A reader of the store sees the old
object or the new one, never a part. Every request carries the Content-MD5 the store
checks; answers' ETags are checked again here, and the client checks the listing after.
A killed push leaves the parts it sent: the client reuses them next time (S3 ListParts,
Azure uncommitted blocks name their MD5).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from cloudgpu.remote.objwire import (
    EXIT_EXPIRED,
    EXIT_INTEGRITY,
    EXIT_NET,
    EXIT_NOTFOUND,
    EXIT_USAGE,
    RETRIES,
    Counters,
    Fail,
    Http,
    Pool,
    Retry,
    emit,
    http_error,
    read_manifest,
    run_main,
    with_retries,
)
from cloudgpu.remote.pushscan import open_under, scan

__all__ = ["EXIT_NOTFOUND", "main"]
_ETAG = re.compile(r'^"?([0-9a-f]{32}(?:-\d+)?)"?$')
_XML_ETAG = re.compile(rb"<ETag>(?:&quot;|\")?([0-9a-f]{32}-\d+)(?:&quot;|\")?</ETag>")
_RANGE = re.compile(r"^bytes=0-(\d+)$")


def b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


# ---------------------------------------------------------------- the push


class Span:
    """Bytes ``start..start+length`` of a file as a body http.client can stream; it
    hashes what it reads and counts it, and rewinds for a retry."""

    def __init__(self, fd: int, start: int, length: int, n: Counters) -> None:
        self.fd, self.start, self.length, self.n = fd, start, length, n
        self.pos = 0
        self.md5 = hashlib.md5()

    def read(self, size: int = -1) -> bytes:
        left = self.length - self.pos
        want = left if size < 0 else min(size, left)
        if want <= 0:
            return b""
        data = os.pread(self.fd, want, self.start + self.pos)
        if not data:
            raise Retry("the file shrank while it was being uploaded")
        self.pos += len(data)
        self.md5.update(data)
        self.n.advance(len(data))
        return data

    def seek(self, offset: int) -> None:
        self.n.advance(offset - self.pos)
        self.pos = offset
        self.md5 = hashlib.md5()

    def digest(self) -> str:
        return self.md5.hexdigest()


class Changed(Fail):
    """The file is not what the scan saw (the job rewrote it): this object is left for
    the next round; the store keeps what it had."""

    def __init__(self, rel: str) -> None:
        super().__init__(f"{rel}: changed while it was being uploaded", EXIT_INTEGRITY)
        self.rel = rel


class Push:
    def __init__(self, m: dict[str, Any], out: Callable[[dict[str, Any]], None]) -> None:
        self.m, self.out = m, out
        self.http = Http(m.get("ca_pem") or None)
        self.pool = Pool(float(m.get("expires_at") or 0))
        self.n = Counters()
        self.root_fd = os.open(m["root"], os.O_RDONLY | os.O_DIRECTORY)
        self.changed: set[str] = set()

    def task(self, fn: Callable[..., None], *args: Any) -> Callable[[], None]:
        """``fn(*args)`` as a pool task: a changed file is noted, not fatal."""

        def run() -> None:
            try:
                fn(*args)
            except Changed as exc:
                with self.n.lock:
                    self.changed.add(exc.rel)

        return run

    def run(self) -> dict[str, Any]:
        for obj in self.m["objects"]:
            self.n.objects += 1
            self.n.total += int(obj["size"])
            kind = obj["how"]
            if kind == "put":
                self.pool.put(self.task(self.single, obj))
            elif kind == "gcs-resumable":
                self.pool.put(self.task(self.resumable, obj))
            elif kind in ("s3-parts", "az-blocks"):
                Parts(self, obj).queue()
            else:
                raise Fail(f"unknown upload kind {kind!r}", EXIT_USAGE)
        workers = max(1, min(int(self.m.get("workers") or 32), 256))
        try:
            self.pool.run(workers, self.n, self.out)
        finally:
            os.close(self.root_fd)
        return {**self.n.event("done"), "changed": sorted(self.changed)[:1000]}

    def upload(
        self, rel: str, what: str, url: str, headers: dict[str, str], span: Span, md5: str
    ) -> Any:
        """PUT ``span`` with ``headers``; check what came back against its MD5. Bytes
        other than the scanned ones (the store refuses them: its URL signs the MD5)
        mean the file changed; a refusal of the scanned bytes, a corruption on the way."""

        def attempt() -> Any:
            span.seek(0)
            sent = {**headers, "Content-Length": str(span.length)}
            try:
                resp = self.http.send("PUT", url, sent, span)
            except Fail as exc:
                if exc.code != EXIT_INTEGRITY:
                    raise
                if span.pos != span.length or span.digest() != md5:
                    raise Changed(rel) from None
                raise Retry(f"{what}: {exc}") from None
            got = span.digest()
            if got != md5:
                raise Changed(rel)
            etag = _ETAG.match(resp.headers.get("etag", ""))
            echoed = resp.headers.get("content-md5")
            if (etag and "-" not in etag.group(1) and etag.group(1) != got) or (
                echoed and echoed != b64(got)
            ):
                raise Fail(f"{what}: the store kept other bytes than were sent", EXIT_INTEGRITY)
            return resp

        return with_retries(what, attempt, self.pool.stop)

    def single(self, obj: dict[str, Any]) -> None:
        fd = open_under(self.root_fd, obj["rel"])
        try:
            span = Span(fd, 0, int(obj["size"]), self.n)
            headers = dict(obj.get("headers", {}))
            self.upload(obj["rel"], obj["rel"], obj["url"], headers, span, obj["md5"])
        finally:
            os.close(fd)
        self.done()

    def done(self) -> None:
        with self.n.lock:
            self.n.objects_done += 1

    def resumable(self, obj: dict[str, Any]) -> None:
        """A GCS resumable session: chunks in order; after a lost connection, ask the
        session how much it has (``Content-Range: bytes */SIZE``) and go on from there."""
        size, chunk, url = int(obj["size"]), int(obj["part_size"]), obj["url"]
        fd = open_under(self.root_fd, obj["rel"])
        try:
            offset, final, failures = 0, None, 0
            while final is None:
                length = min(chunk, size - offset)
                span = Span(fd, offset, length, self.n)
                headers = {
                    "Content-Range": f"bytes {offset}-{offset + length - 1}/{size}",
                    "Content-Length": str(length),
                }
                try:
                    resp = self.http.send("PUT", url, headers, span, ok=(200, 201, 308))
                except Retry as exc:
                    span.seek(0)  # uncounted: the session says below what it kept
                    failures += 1
                    if failures > RETRIES or self.pool.stop.is_set():
                        msg = f"{obj['rel']}: {exc} (after {RETRIES} retries)"
                        raise Fail(msg, EXIT_NET) from exc
                    time.sleep(min(0.2 * 2**failures, 5.0))
                    kept, final = self._session_status(url, size)
                    self.n.advance(kept - offset)
                    offset = kept
                    continue
                offset += length
                final = None if resp.status == 308 else resp
            _check_gcs_final(obj, final)
        except Fail as exc:
            if exc.code == EXIT_INTEGRITY:  # GCS refused the whole: it is not what was scanned
                raise Changed(obj["rel"]) from None
            raise
        finally:
            os.close(fd)
        self.done()

    def _session_status(self, url: str, size: int) -> tuple[int, Any]:
        """(bytes the session holds, the final answer when it already has them all)."""

        def ask() -> Any:
            headers = {"Content-Range": f"bytes */{size}", "Content-Length": "0"}
            return self.http.send("PUT", url, headers, b"", ok=(200, 201, 308))

        resp = with_retries("resumable session status", ask, self.pool.stop)
        if resp.status != 308:
            return size, resp
        m = _RANGE.match(resp.headers.get("range", ""))
        return (int(m.group(1)) + 1 if m else 0), None


def _check_gcs_final(obj: dict[str, Any], resp: Any) -> None:
    try:
        meta = json.loads(resp.body)
    except ValueError:
        meta = {}
    md5 = meta.get("md5Hash") if isinstance(meta, dict) else None
    if md5 and md5 != b64(obj["md5"]):
        raise Fail(f"{obj['rel']}: the store kept other bytes than were sent", EXIT_INTEGRITY)


class Parts:
    """A large object in parallel parts: S3 multipart (UploadPart, then Complete) or
    Azure blocks (Put Block, then Put Block List); committed by whichever part ends last."""

    def __init__(self, push: Push, obj: dict[str, Any]) -> None:
        self.push, self.obj = push, obj
        self.size, self.psize = int(obj["size"]), int(obj["part_size"])
        self.parts: list[dict[str, Any]] = obj["parts"]
        self.etags: dict[int, str] = {}
        self.left: set[int] = set()
        for i, p in enumerate(self.parts):
            if p.get("done"):
                self.etags[i] = str(p["done"])
                with push.n.lock:
                    push.n.resumed += self._length(i)
                    push.n.done += self._length(i)
            else:
                self.left.add(i)
        self.lock = threading.Lock()
        self.fd = open_under(push.root_fd, obj["rel"])
        self.dead = False  # a part found the file changed: never commit this upload

    def _length(self, i: int) -> int:
        return min(self.psize, self.size - i * self.psize)

    def queue(self) -> None:
        if not self.left:
            self.push.pool.put(self.push.task(self.commit))
        for i in sorted(self.left):
            self.push.pool.put(self.push.task(self.send, i))

    def send(self, i: int) -> None:
        p, rel = self.parts[i], self.obj["rel"]
        span = Span(self.fd, i * self.psize, self._length(i), self.push.n)
        what = f"{rel} part {i + 1}/{len(self.parts)}"
        etag, changed = "", False
        if not self.dead:
            try:
                headers = {"Content-MD5": b64(p["md5"])}
                resp = self.push.upload(rel, what, p["url"], headers, span, p["md5"])
                etag = resp.headers.get("etag", "").strip('"') or p["md5"]
            except Changed:
                changed = True
        with self.lock:
            self.dead = self.dead or changed
            self.etags[i] = etag
            self.left.discard(i)
            last = not self.left
        if last:
            self.commit()
        if changed:
            raise Changed(rel)

    def commit(self) -> None:
        os.close(self.fd)
        if self.dead:
            return  # the parts sent stay unused; a later round starts this file again
        obj = self.obj
        s3 = obj["how"] == "s3-parts"
        if s3:
            items = (
                f'<Part><PartNumber>{i + 1}</PartNumber><ETag>"{self.etags[i]}"</ETag></Part>'
                for i in range(len(self.parts))
            )
            body = "<CompleteMultipartUpload>" + "".join(items) + "</CompleteMultipartUpload>"
            headers = {"Content-Type": "application/xml"}
        else:
            ids = "".join(f"<Latest>{p['id']}</Latest>" for p in self.parts)
            body = f'<?xml version="1.0" encoding="utf-8"?><BlockList>{ids}</BlockList>'
            headers = {"Content-Type": "application/xml", "x-ms-blob-content-md5": b64(obj["md5"])}
        data = body.encode()
        headers["Content-Length"] = str(len(data))

        def attempt() -> Any:
            resp = self.push.http.send("POST" if s3 else "PUT", obj["complete"], headers, data)
            if b"<Error>" in resp.body:  # S3 may report a failed completion with a 200
                raise http_error(500, resp.body)
            return resp

        resp = with_retries(f"{obj['rel']}: completing the upload", attempt, self.push.pool.stop)
        if s3:
            m = _XML_ETAG.search(resp.body)
            want = hashlib.md5(b"".join(bytes.fromhex(p["md5"]) for p in self.parts)).hexdigest()
            if m and m.group(1).decode() != f"{want}-{len(self.parts)}":
                raise Fail(f"{obj['rel']}: the store assembled other bytes", EXIT_INTEGRITY)
        self.push.done()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("scan", "push"):
        sys.stderr.write("usage: pusher scan SPEC_JSON | pusher push MANIFEST\n")
        return EXIT_USAGE
    if argv[0] == "scan":
        return run_main(lambda: scan(json.loads(argv[1])))

    def body() -> dict[str, Any]:
        manifest = read_manifest(argv[1])
        expires = float(manifest.get("expires_at") or 0)
        if expires and time.time() > expires:
            raise Fail("the signed URLs expired before the upload started", EXIT_EXPIRED)
        return Push(manifest, emit).run()

    return run_main(body)
