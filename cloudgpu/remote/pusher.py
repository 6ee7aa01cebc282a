"""The instance-side object pusher: outputs and checkpoints uploaded by the instance itself.

Run with the instance's python3, standard library only (plus cloudgpu.remote.objwire,
shipped with it by cloudgpu.remote.scripts). No cloud credential is on the instance:
the client signs one URL per object and operation, each valid for the transfer window.

``scan SPEC`` (SPEC: JSON ``{"root", "state_dir", "part_size", "max_parts", "skip"}``)
walks the tree (no symlink followed or sent, only regular files) and prints one line per
file: its path, size, mtime, MD5 and, for files above the part size, the MD5 of each
part. The client decides from these what to send (a file the store already holds with
the same size and checksum is skipped) and signs URLs that carry those checksums, so a
URL can store only the bytes that were scanned. An index (size, mtime) per tree spares
rehashing unchanged files at the next sync.

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
import stat
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cloudgpu.remote.objwire import (
    CHUNK,
    EXIT_EXPIRED,
    EXIT_INTEGRITY,
    EXIT_IO,
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
    read_json,
    read_manifest,
    run_main,
    with_retries,
    write_json,
)

__all__ = ["EXIT_NOTFOUND", "main"]
HASHERS = 8
_ETAG = re.compile(r'^"?([0-9a-f]{32}(?:-\d+)?)"?$')
_XML_ETAG = re.compile(rb"<ETag>(?:&quot;|\")?([0-9a-f]{32}-\d+)(?:&quot;|\")?</ETag>")
_RANGE = re.compile(r"^bytes=0-(\d+)$")


def part_size_for(size: int, base: int, max_parts: int) -> int:
    """The part size of a file: ``base``, grown in MiB steps to stay within ``max_parts``."""
    need = -(-size // max_parts)
    return max(base, -(-need // (1 << 20)) * (1 << 20))


def b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


# ---------------------------------------------------------------- the tree


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
