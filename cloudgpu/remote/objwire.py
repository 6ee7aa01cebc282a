"""What the instance-side object scripts share: HTTP to the stores, errors, retries.

The puller (cloudgpu/remote/puller.py) and the pusher (cloudgpu/remote/pusher.py) run
on the instance with its own python3 and import nothing but the standard library and
this module; :func:`cloudgpu.remote.scripts.source` ships the three to the instance as
one ``python3 -c`` program. So: standard library only, never anything else of cloudgpu.

Exit statuses (both scripts): 0 ok, 2 usage, 10 access denied, 11 URL expired,
12 not found, 13 integrity failure, 14 I/O error, 15 network failure.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import random
import re
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

EXIT_USAGE, EXIT_AUTH, EXIT_EXPIRED, EXIT_NOTFOUND = 2, 10, 11, 12
EXIT_INTEGRITY, EXIT_IO, EXIT_NET = 13, 14, 15
CHUNK = 1 << 20
RETRIES = 5
TIMEOUT_S = 60.0
USER_AGENT = "cloudgpu-objects/1"
MAX_ERROR_BODY = 65536
_ERR_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")
_ERR_MSG = re.compile(rb"<Message>([^<]{1,300})</Message>")
# The stores' words for "the bytes did not match the Content-MD5 you sent" (S3 BadDigest,
# InvalidDigest; Azure Md5Mismatch; GCS BadDigest on the XML API, 400 on JSON uploads).
_DIGEST_CODES = (
    "baddigest",
    "invaliddigest",
    "md5mismatch",
    "crc32cmismatch",
    "calculated md5",  # GCS JSON uploads: "Provided MD5 hash ... doesn't match calculated..."
)


class Fail(Exception):
    """A failure that ends the transfer, with its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Retry(Exception):
    """A transient failure (connection lost, 5xx, throttled): try again."""


class Body(Protocol):
    """What a request streams: http.client reads it in blocks; retries rewind it."""

    def read(self, size: int = -1) -> bytes: ...

    def seek(self, offset: int) -> Any: ...


class Response:
    """What a request got back: status, headers (lowercase names), a bounded body."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class Http:
    """One kept-alive connection per (thread, host): small objects cost one round trip.
    ``ca_pem``: certificates to trust besides the system's (a private endpoint's CA,
    from the manifest); TLS verification itself is never turned off."""

    def __init__(self, ca_pem: str | None = None) -> None:
        self._local = threading.local()
        self._tls = ssl.create_default_context()
        if ca_pem:
            self._tls.load_verify_locations(cadata=ca_pem)

    def _conn(self, scheme: str, netloc: str, fresh: bool) -> http.client.HTTPConnection:
        conns: dict[tuple[str, str], http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "conns", {}
        )
        key = (scheme, netloc)
        conn = conns.get(key)
        if conn is not None and not fresh:
            return conn
        if conn is not None:
            conn.close()
        if scheme == "https":
            conn = http.client.HTTPSConnection(
                netloc, timeout=TIMEOUT_S, context=self._tls, blocksize=CHUNK
            )
        else:
            conn = http.client.HTTPConnection(netloc, timeout=TIMEOUT_S, blocksize=CHUNK)
        conns[key] = conn
        return conn

    def _send(
        self, method: str, url: str, headers: dict[str, str], body: Body | bytes | None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        parts = urlsplit(url)
        target = parts.path + ("?" + parts.query if parts.query else "")
        headers = {"User-Agent": USER_AGENT, **headers}
        conn = self._conn(parts.scheme, parts.netloc, fresh=False)
        try:
            conn.request(method, target, body=body, headers=headers)
        except (http.client.HTTPException, OSError):
            if body is not None and not isinstance(body, bytes):
                body.seek(0)
            conn = self._conn(parts.scheme, parts.netloc, fresh=True)  # stale keep-alive
            conn.request(method, target, body=body, headers=headers)
        return conn, conn.getresponse()

    def get(self, url: str, start: int, end: int | None, sink: Callable[[bytes], None]) -> int:
        """GET bytes ``start..end`` (inclusive; None: to the end) of ``url`` into ``sink``;
        returns the bytes received. Raises Retry (transient) or Fail."""
        headers = {"Accept-Encoding": "identity"}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end}"
        netloc = urlsplit(url)
        try:
            _conn, resp = self._send("GET", url, headers, None)
            if resp.status not in (200, 206):
                raise http_error(resp.status, resp.read(MAX_ERROR_BODY))
            if start and resp.status != 206:
                raise Fail("the store ignored the Range header", EXIT_NET)
            want = None if end is None else end - start + 1
            got = 0
            while block := resp.read(CHUNK):
                got += len(block)
                if want is not None and got > want:
                    raise Fail("the store sent more bytes than asked for", EXIT_NET)
                sink(block)
            if want is not None and got != want:
                raise Retry(f"short read: {got} of {want} bytes")
            return got
        except (http.client.HTTPException, OSError) as exc:
            self._conn(netloc.scheme, netloc.netloc, fresh=True)
            raise _transient(exc) from exc

    def send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: Body | bytes | None = None,
        ok: tuple[int, ...] = (200, 201),
    ) -> Response:
        """One request with a body (a file-like object is streamed, its length given in
        ``headers``); statuses outside ``ok`` become Fail/Retry as for GETs."""
        netloc = urlsplit(url)
        try:
            _conn, resp = self._send(method, url, headers, body)
            data = resp.read(MAX_ERROR_BODY + 1)
            if len(data) > MAX_ERROR_BODY:
                resp.close()  # an answer this long is not one of ours: drop the connection
                self._conn(netloc.scheme, netloc.netloc, fresh=True)
            if resp.status not in ok:
                raise http_error(resp.status, data)
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        except (http.client.HTTPException, OSError) as exc:
            self._conn(netloc.scheme, netloc.netloc, fresh=True)
            raise _transient(exc) from exc


def _transient(exc: BaseException) -> Exception:
    if isinstance(exc, ssl.SSLCertVerificationError):  # retrying will not make it trusted
        return Fail(f"TLS certificate not trusted: {exc.verify_message}", EXIT_NET)
    if (
        isinstance(exc, OSError)
        and not isinstance(exc, ConnectionError | TimeoutError)
        and exc.errno in (28, 30, 122)  # ENOSPC EROFS EDQUOT: the disk, not the net
    ):
        return Fail(f"disk: {exc.strerror}", EXIT_IO)
    return Retry(f"{type(exc).__name__}: {exc}")


def http_error(status: int, body: bytes) -> Exception:
    """The Fail or Retry an error answer means, with the store's own code and message."""
    code_m, msg_m = _ERR_CODE.search(body), _ERR_MSG.search(body)
    code = code_m.group(1).decode(errors="replace") if code_m else ""
    msg = msg_m.group(1).decode(errors="replace") if msg_m else ""
    if not msg and body[:1] == b"{":
        try:
            msg = str(json.loads(body).get("error", {}).get("message", ""))
        except (ValueError, AttributeError):
            msg = ""
    text = f"HTTP {status}" + (f" {code}" if code else "") + (f": {msg}" if msg else "")
    lowered = (code + " " + msg + " " + body[:2000].decode(errors="replace")).lower()
    if status in (400, 401, 403) and ("expire" in lowered or "time frame" in lowered):
        return Fail(f"signed URL expired ({text})", EXIT_EXPIRED)
    if status in (400, 409) and any(c in lowered for c in _DIGEST_CODES):
        return Fail(f"the store refused the bytes: checksum mismatch ({text})", EXIT_INTEGRITY)
    if status in (401, 403):
        return Fail(f"access denied ({text})", EXIT_AUTH)
    if status == 404:
        return Fail(f"not found ({text})", EXIT_NOTFOUND)
    if status in (408, 429) or status >= 500:
        return Retry(text)
    return Fail(text, EXIT_NET)


def with_retries(what: str, fn: Callable[[], Any], stop: threading.Event) -> Any:
    delay = 0.2
    for attempt in range(RETRIES + 1):
        if stop.is_set():
            raise Fail("stopped", EXIT_NET)
        try:
            return fn()
        except Retry as exc:
            if attempt == RETRIES:
                raise Fail(f"{what}: {exc} (after {RETRIES} retries)", EXIT_NET) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")


def expired_if_late(exc: Fail, expires_at: float) -> Fail:
    """Some stores (Azurite, and Azure without error details) say only "denied" when a
    SAS has run out: past the window, that is what it means."""
    if exc.code == EXIT_AUTH and expires_at and time.time() > expires_at - 60:
        return Fail(f"signed URL expired at {utc(expires_at)}: {exc}", EXIT_EXPIRED)
    return exc


# ---------------------------------------------------------------- files and lines


def write_json(path: str, data: Any) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def read_manifest(path: str) -> dict[str, Any]:
    """Read and delete a manifest: its signed URLs must not outlive the transfer on disk."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    finally:
        unlink(path)
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if not isinstance(data, dict) or data.get("version") != 1:
        raise Fail("unsupported manifest", EXIT_USAGE)
    return data


_EMIT = threading.Lock()


def emit(event: dict[str, Any]) -> None:
    """One JSON line on stdout (whole: threads emit too)."""
    line = json.dumps(event) + "\n"
    with _EMIT:
        sys.stdout.write(line)
        sys.stdout.flush()


def run_main(body: Callable[[], dict[str, Any]]) -> int:
    """Run ``body`` and print its last event; failures as one ``error`` event + status."""
    try:
        emit(body())
    except Fail as exc:
        emit({"ev": "error", "code": exc.code, "message": str(exc)})
        sys.stderr.write(f"{exc}\n")
        return exc.code
    except OSError as exc:
        msg = f"{exc.filename or ''}: {exc.strerror or exc}"
        emit({"ev": "error", "code": EXIT_IO, "message": msg})
        sys.stderr.write(msg + "\n")
        return EXIT_IO
    return 0


class Counters:
    """Bytes and objects done, reported as progress lines about 4 times a second."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = self.done = self.resumed = 0
        self.objects = self.objects_done = self.skipped = self.skipped_bytes = 0
        self.t0 = time.monotonic()

    def advance(self, n: int) -> None:
        with self.lock:
            self.done += n

    def event(self, ev: str = "progress") -> dict[str, Any]:
        with self.lock:
            return {
                "ev": ev,
                "done": self.done,
                "total": self.total,
                "objects_done": self.objects_done,
                "objects": self.objects,
                "skipped": self.skipped,
                "skipped_bytes": self.skipped_bytes,
                "resumed_bytes": self.resumed,
                "seconds": round(time.monotonic() - self.t0, 3),
            }


class Pool:
    """Worker threads over a queue of tasks; the first failure stops the rest."""

    def __init__(self, expires_at: float) -> None:
        self.expires_at = expires_at
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.fail: Fail | None = None
        self._queue: deque[Callable[[], None]] = deque()

    def put(self, task: Callable[[], None]) -> None:
        with self.lock:
            self._queue.append(task)

    def _next(self) -> Callable[[], None] | None:
        with self.lock:
            return self._queue.popleft() if self._queue else None

    def _worker(self) -> None:
        while (task := self._next()) is not None:
            if self.stop.is_set():
                continue
            try:
                task()
            except Fail as exc:
                self.failed(exc)
            except OSError as exc:
                self.failed(Fail(f"{exc.filename or ''}: {exc.strerror or exc}", EXIT_IO))

    def failed(self, exc: Fail) -> None:
        exc = expired_if_late(exc, self.expires_at)
        with self.lock:
            if self.fail is None:
                self.fail = exc
        self.stop.set()

    def run(self, workers: int, counters: Counters, out: Callable[[dict[str, Any]], None]) -> None:
        """Run every task put so far on ``workers`` threads (a task that finishes an
        object's last part completes the object itself: no task queues another)."""
        threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(workers)]
        for t in threads:
            t.start()
        done = threading.Event()

        def report() -> None:
            while not done.wait(0.25):
                out(counters.event())

        reporter = threading.Thread(target=report, daemon=True)
        reporter.start()
        for t in threads:
            t.join()
        done.set()
        reporter.join()
        if self.fail is not None:
            raise self.fail
