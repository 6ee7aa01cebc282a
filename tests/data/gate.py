"""A loopback gate in front of an object store: signed-URL checks, access log, faults.

Every request to the store (the client's listing and the instance's object reads) goes
through it. It

* checks presigned URLs the way the real store does, before the emulator sees them:
  S3 SigV4 query auth (recomputed with botocore's own S3SigV4QueryAuth) and GCS V4
  signatures (RSA, verified with the test service account's public key), and refuses an
  expired or tampered URL with that store's documented error (moto and
  gcp-storage-emulator check neither); Azurite checks its SAS tokens itself;
* logs every request: method, path, status, body bytes sent, and whether the peer
  socket belongs to this test process (the client runs in-process through CliRunner,
  the instance-side puller in another process), so a test can assert that the client
  read no object;
* checks a PUT's body against its Content-MD5 where the real store does and the
  emulator does not (S3 and GCS: BadDigest; Azurite checks itself);
* can cut a response after N bytes (a dropped connection mid-object), slow it down, or
  hold requests to a path, or stall a path's PUTs after N of them (an upload killed
  between its parts).

Error shapes: S3 BadDigest/InvalidDigest (400) as in
https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html#ErrorCodeList, GCS
BadDigest (400) as in https://cloud.google.com/storage/docs/xml-api/reference-status;
S3 "Request has expired" (403 AccessDenied) and SignatureDoesNotMatch as in
https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html and
https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html; GCS
ExpiredToken (400) as in https://cloud.google.com/storage/docs/xml-api/reference-status
and https://cloud.google.com/storage/docs/access-control/signed-urls.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import http.client
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


@dataclass
class Hit:
    method: str
    path: str
    query: dict[str, str]
    status: int
    body_bytes: int
    from_client: bool  # the peer socket is this test process's own
    sent_bytes: int = 0  # request body (uploads)


@dataclass
class Gate:
    upstream: str  # http://127.0.0.1:PORT of the emulator
    verify: Callable[[str, str, dict[str, str], dict[str, str], float], tuple[int, bytes] | None]
    clock: Callable[[], float] = time.time
    hits: list[Hit] = field(default_factory=list)
    cut_after: dict[str, int] = field(default_factory=dict)  # path -> bytes, one-shot
    slow: dict[str, float] = field(default_factory=dict)  # path -> seconds per 64 KiB
    hold: dict[str, float] = field(default_factory=dict)  # path -> seconds before answering
    # path -> PUTs let through; the ones after wait until ``released`` is set (an upload
    # stopped between its parts for as long as the test needs, whatever the load)
    stall_after: dict[str, int] = field(default_factory=dict)
    released: threading.Event = field(default_factory=threading.Event)
    puts_seen: dict[str, int] = field(default_factory=dict)
    check_md5: bool = False  # refuse PUT bodies that do not match their Content-MD5
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def object_reads(self, is_object: Callable[[Hit], bool]) -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if is_object(h)]


def _own_socket_inodes() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def _peer_inode(peer_port: int, gate_port: int) -> str | None:
    """The inode of the socket at 127.0.0.1:peer_port connected to our gate_port."""
    want_local = f"0100007F:{peer_port:04X}"
    want_remote = f"0100007F:{gate_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[1].endswith(want_local[-13:]) and cols[2].endswith(want_remote[-13:]):
                return cols[9]
    return None


def _handler(gate: Gate) -> type[BaseHTTPRequestHandler]:
    up = urlsplit(gate.upstream)

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        _mine: bool | None = None

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _from_client(self) -> bool:
            if self._mine is None:
                inode = _peer_inode(self.client_address[1], self.server.server_address[1])
                self._mine = inode is not None and inode in _own_socket_inodes()
            return self._mine

        def _any(self) -> None:
            parts = urlsplit(self.path)
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            self._sent = len(body)
            if gate.hold.get(parts.path):
                time.sleep(gate.hold[parts.path])
            if self.command == "PUT" and parts.path in gate.stall_after:
                with gate.lock:
                    seen = gate.puts_seen[parts.path] = gate.puts_seen.get(parts.path, 0) + 1
                if seen > gate.stall_after[parts.path]:
                    gate.released.wait(120)
                    self.close_connection = True  # its sender died meanwhile: never stored
                    return
            refused = gate.verify(self.command, self.path, query, headers, gate.clock())
            if refused is None and gate.check_md5 and self.command == "PUT":
                refused = _digest(headers.get("content-md5"), body)
            if refused is not None:
                status, err = refused
                self._reply(status, err, {"Content-Type": "application/xml"}, parts, query)
                return
            conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=60)
            fwd = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            conn.request(self.command, self.path, body=body or None, headers=fwd)
            resp = conn.getresponse()
            self.send_response(resp.status)
            rh = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
            size = resp.getheader("Content-Length")
            for k, v in rh:
                self.send_header(k, v)
            chunked = size is None and self.command != "HEAD" and resp.status not in (204, 304)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            with gate.lock:
                cut = gate.cut_after.pop(parts.path, None)
            delay = gate.slow.get(parts.path, 0.0)
            while block := resp.read(1 << 16):
                if delay:
                    time.sleep(delay)
                if cut is not None and sent + len(block) > cut:
                    self.wfile.write(block[: cut - sent])
                    sent = cut
                    self.close_connection = True
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
                sent += len(block)
            else:
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
            conn.close()
            self._log(parts.path, query, resp.status, sent)

        def _reply(
            self, status: int, body: bytes, headers: dict[str, str], parts: Any, query: Any
        ) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self._log(parts.path, query, status, len(body))

        def _log(self, path: str, query: dict[str, str], status: int, n: int) -> None:
            with gate.lock:
                hit = Hit(self.command, path, query, status, n, self._from_client())
                hit.sent_bytes = getattr(self, "_sent", 0)
                gate.hits.append(hit)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _any

    return H


BAD_DIGEST = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>BadDigest</Code><Message>The '
    "Content-MD5 you specified did not match what we received.</Message>"
    "<RequestId>4442587FB7D0A2F9</RequestId><HostId>gate</HostId></Error>"
)
INVALID_DIGEST = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InvalidDigest</Code><Message>The '
    "Content-MD5 you specified is not valid.</Message>"
    "<RequestId>4442587FB7D0A2F9</RequestId><HostId>gate</HostId></Error>"
)


def _digest(given: str | None, body: bytes) -> tuple[int, bytes] | None:
    if given is None:
        return None
    try:
        want = base64.b64decode(given, validate=True)
    except (binascii.Error, ValueError):
        return 400, INVALID_DIGEST.encode()
    if len(want) != 16:
        return 400, INVALID_DIGEST.encode()
    if hashlib.md5(body).digest() != want:
        return 400, BAD_DIGEST.encode()
    return None


@contextmanager
def gate(
    upstream: str,
    verify: Callable[[str, str, dict[str, str], dict[str, str], float], tuple[int, bytes] | None],
    *,
    check_md5: bool = False,
) -> Iterator[Gate]:
    g = Gate(upstream, verify, check_md5=check_md5)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(g))
    server.daemon_threads = True
    g.url = f"http://127.0.0.1:{server.server_address[1]}"
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield g
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- S3 (SigV4 query auth)

S3_EXPIRED = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    "<Message>Request has expired</Message><X-Amz-Expires>{expires}</X-Amz-Expires>"
    "<Expires>{at}</Expires><ServerTime>{now}</ServerTime>"
    "<RequestId>4442587FB7D0A2F9</RequestId><HostId>gate</HostId></Error>"
)
S3_BAD_SIGNATURE = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SignatureDoesNotMatch</Code>'
    "<Message>The request signature we calculated does not match the signature you "
    "provided. Check your key and signing method.</Message>"
    "<RequestId>4442587FB7D0A2F9</RequestId><HostId>gate</HostId></Error>"
)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def s3_verifier(
    access_key: str, secret_key: str
) -> Callable[[str, str, dict[str, str], dict[str, str], float], tuple[int, bytes] | None]:
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    def verify(
        method: str, path: str, q: dict[str, str], headers: dict[str, str], now: float
    ) -> tuple[int, bytes] | None:
        if "X-Amz-Signature" not in q:
            return None  # header-signed SDK calls: moto's business
        stamp = q.get("X-Amz-Date", "")
        region = q.get("X-Amz-Credential", "").split("/")[2]
        url = f"http://{headers['host']}{path}"
        url = url[: url.index("&X-Amz-Signature=")] if "&X-Amz-Signature=" in url else url
        names = q.get("X-Amz-SignedHeaders", "host").split(";")
        req = AWSRequest(method=method, url=url, headers={h: headers.get(h, "") for h in names})
        req.context["timestamp"] = stamp
        auth = S3SigV4QueryAuth(Credentials(access_key, secret_key), "s3", region)
        canonical = auth.canonical_request(req)
        expected = auth.signature(auth.string_to_sign(req, canonical), req)
        if expected != q["X-Amz-Signature"]:
            return 403, S3_BAD_SIGNATURE.encode()
        signed = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
        expires = int(q.get("X-Amz-Expires", "0"))
        if now > signed + expires:
            body = S3_EXPIRED.format(expires=expires, at=_iso(signed + expires), now=_iso(now))
            return 403, body.encode()
        return None

    return verify


def s3_object_read(h: Hit) -> bool:
    """A GET of an object's bytes (path /bucket/key), not a listing or a HEAD."""
    return h.method == "GET" and h.path.strip("/").count("/") >= 1 and "list-type" not in h.query


# ---------------------------------------------------------------- GCS (V4, RSA)

GCS_EXPIRED = (
    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>ExpiredToken</Code>"
    "<Message>The provided token has expired.</Message>"
    "<Details>Request signature expired at: {at}</Details></Error>"
)
GCS_BAD_SIGNATURE = (
    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>SignatureDoesNotMatch</Code>"
    "<Message>Access denied.</Message><Details>The request signature we calculated does "
    "not match the signature you provided.</Details></Error>"
)


def gcs_verifier(
    public_key_pem: bytes,
) -> Callable[[str, str, dict[str, str], dict[str, str], float], tuple[int, bytes] | None]:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    key = serialization.load_pem_public_key(public_key_pem)

    def verify(
        method: str, path: str, q: dict[str, str], headers: dict[str, str], now: float
    ) -> tuple[int, bytes] | None:
        if "X-Goog-Signature" not in q:
            return None
        resource, _, query = path.partition("?")
        canon_q = "&".join(p for p in query.split("&") if not p.startswith("X-Goog-Signature="))
        signed = q.get("X-Goog-SignedHeaders", "host")
        canon_h = "".join(f"{h}:{headers.get(h, '')}\n" for h in signed.split(";"))
        canonical = f"{method}\n{resource}\n{canon_q}\n{canon_h}\n{signed}\nUNSIGNED-PAYLOAD"
        stamp = q.get("X-Goog-Date", "")
        scope = q.get("X-Goog-Credential", "").split("/", 1)[1]
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        to_sign = f"GOOG4-RSA-SHA256\n{stamp}\n{scope}\n{digest}".encode()
        try:
            key.verify(  # type: ignore[union-attr, call-arg]
                bytes.fromhex(q["X-Goog-Signature"]), to_sign, padding.PKCS1v15(), hashes.SHA256()
            )
        except (InvalidSignature, ValueError):
            return 403, GCS_BAD_SIGNATURE.encode()
        at = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")) + int(q["X-Goog-Expires"])
        if now > at:
            return 400, GCS_EXPIRED.format(at=_iso(at)).encode()
        return None

    return verify


def gcs_object_read(h: Hit) -> bool:
    """Media reads: signed XML-style ``/bucket/object`` GETs or JSON ``alt=media``."""
    if h.method != "GET":
        return False
    if h.query.get("alt") == "media" or h.path.startswith("/download/"):
        return True
    return not h.path.startswith(("/storage/", "/b/")) and h.path.strip("/").count("/") >= 1


def azure_object_read(h: Hit) -> bool:
    """GET /account/container/blob without a comp= (list, properties) query."""
    return h.method == "GET" and h.path.strip("/").count("/") >= 2 and "comp" not in h.query
