"""An https:// source served on loopback with a certificate from a test CA (made here):
trusted only through $CLOUDGPU_CA_FILE, on the client (HEAD) and on the instance (the
puller gets the CA in its manifest); verification is never switched off."""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cloudgpu.data import instance, pull
from cloudgpu.data.select import Selector
from cloudgpu.data.stores.https import HttpsStore
from cloudgpu.data.uri import parse
from cloudgpu.errors import ConfigError, RemoteError
from cloudgpu.remote import LocalMachine

BODY = os.urandom(20 << 20)  # large enough to come in ranged parts


@dataclass
class Served:
    url: str
    ca_file: Path
    ranges: list[str]


def _pki(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (valid a day either way)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cloudgpu test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp / "cert.pem").write_bytes(cert.public_bytes(pem))
    (tmp / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"


def _handler(ranges: list[str]) -> type[BaseHTTPRequestHandler]:
    md5 = base64.b64encode(hashlib.md5(BODY).digest()).decode()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _head(self, status: int, length: int, extra: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.send_header("ETag", '"v1"')
            self.send_header("Content-MD5", md5)
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()

        def do_HEAD(self) -> None:
            self._head(200, len(BODY), {})

        def do_GET(self) -> None:
            rng = self.headers.get("Range")
            if not rng:
                self._head(200, len(BODY), {})
                self.wfile.write(BODY)
                return
            ranges.append(rng)
            start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            part = BODY[start : end + 1]
            self._head(206, len(part), {"Content-Range": f"bytes {start}-{end}/{len(BODY)}"})
            self.wfile.write(part)

    return H


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    ca, cert, key = _pki(tmp_path)
    ranges: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ranges))
    server.daemon_threads = True
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield Served(f"https://127.0.0.1:{server.server_address[1]}/d/blob.bin", ca, ranges)
    finally:
        server.shutdown()
        server.server_close()


def test_https_source_with_a_trusted_test_ca_is_pulled_and_checked(
    served: Served, tmp_path: Path
) -> None:
    env = {instance.CA_FILE_ENV: str(served.ca_file)}
    src = parse(served.url)
    store = HttpsStore(env)
    listing = pull.list_source_with(src, store, Selector())
    assert listing.objects[0].check == {"md5": hashlib.md5(BODY).hexdigest()}
    m = LocalMachine(tmp_path / "i", base_env={"PATH": os.environ["PATH"]})
    stats = pull.pull(
        m, listing, store, f"{m.nvme_path}/d", part_size=8 << 20, ca_pem=instance.trusted_ca(env)
    )
    assert Path(m.nvme_path, "d", "blob.bin").read_bytes() == BODY
    assert stats.bytes == len(BODY) and len(served.ranges) == 3  # ranged parts, over TLS


def test_untrusted_certificate_is_refused_on_both_sides(served: Served, tmp_path: Path) -> None:
    src = parse(served.url)
    with pytest.raises(ConfigError, match="TLS certificate not trusted") as exc:
        pull.list_source_with(src, HttpsStore({}), Selector())
    assert exc.value.hint and instance.CA_FILE_ENV in exc.value.hint
    # The client trusts the CA but the instance is not told to: it refuses, at once.
    trusting = HttpsStore({instance.CA_FILE_ENV: str(served.ca_file)})
    listing = pull.list_source_with(src, trusting, Selector())
    m = LocalMachine(tmp_path / "i", base_env={"PATH": os.environ["PATH"]})
    with pytest.raises(RemoteError, match="TLS certificate not trusted"):
        pull.pull(m, listing, HttpsStore({}), f"{m.nvme_path}/d")
    assert not Path(m.nvme_path, "d", "blob.bin").exists()


def test_ca_file_that_is_not_pem_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="expected PEM certificates"):
        instance.trusted_ca({instance.CA_FILE_ENV: str(tmp_path / "ca.pem")})
