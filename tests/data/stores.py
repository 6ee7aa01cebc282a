"""The three object stores on loopback, each behind a tests.data.gate.Gate, and a mixed
dataset (one large object, many small ones) put into them with their own SDKs.

* S3: moto's ThreadedMotoServer; the large object uploaded in 8 MiB parts (multipart
  ETag), the small ones with put_object (MD5 ETags).
* GCS: gcp-storage-emulator (PyPI) in this process; signing with a service-account key
  generated for the test (its public half verifies signatures in the gate).
* Azure: Azurite (npm, tools/azurite, installed by `make install`) in a child process;
  SAS tokens checked by Azurite itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.data.gate import (
    Gate,
    Hit,
    azure_object_read,
    gate,
    gcs_object_read,
    gcs_verifier,
    s3_object_read,
    s3_verifier,
)

ROOT = Path(__file__).resolve().parents[2]
AZURITE = ROOT / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's documented development account (https://learn.microsoft.com/azure/storage/
# common/storage-use-azurite#well-known-storage-account-and-key): public, test-only.
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
S3_KEY, S3_SECRET = "AKIDCLOUDGPUTEST", "s3-secret-that-must-stay-on-the-client"


@dataclass
class Dataset:
    """name -> bytes, and what a store listing of it under ``prefix`` should yield."""

    files: dict[str, bytes]
    large: str

    def digests(self) -> dict[str, str]:
        return {k: hashlib.sha256(v).hexdigest() for k, v in self.files.items()}

    @property
    def bytes(self) -> int:
        return sum(map(len, self.files.values()))


def mixed(small: int = 300, large_mb: int = 20, seed: int = 7) -> Dataset:
    rnd = __import__("random").Random(seed)
    files = {
        f"small/{i // 100:03d}/s{i:05d}.bin": rnd.randbytes(rnd.randint(1, 2048))
        for i in range(small)
    }
    files["big/large.bin"] = rnd.randbytes(large_mb << 20)
    return Dataset(files, "big/large.bin")


@dataclass
class StoreUnderTest:
    name: str
    uri: str  # the data source the job names
    env: dict[str, str]
    gate: Gate
    is_object_read: Any
    secrets: list[str] = field(default_factory=list)  # must never reach the instance/logs
    extra: dict[str, Any] = field(default_factory=dict)

    def client_object_reads(self) -> list[Hit]:
        return [h for h in self.gate.object_reads(self.is_object_read) if h.from_client]

    def instance_object_reads(self) -> list[Hit]:
        return [h for h in self.gate.object_reads(self.is_object_read) if not h.from_client]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _parallel(fn: Any, items: Any) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(fn, items))


# ---------------------------------------------------------------- S3


def s3_client(url: str) -> Any:
    """An S3 client of the test's own, with the test keys, for moto (or the gate) at ``url``."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
    )


def gcs_client(url: str) -> Any:
    """An anonymous GCS client for the emulator (or the gate) at ``url``."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    return storage.Client(
        project="cloudgpu-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": url},
    )


@contextmanager
def s3_store(data: Dataset, prefix: str = "sets/v1") -> Iterator[StoreUnderTest]:
    from boto3.s3.transfer import TransferConfig

    from tests.providers.aws_fixtures.servers import moto_server

    with moto_server() as url, gate(url, s3_verifier(S3_KEY, S3_SECRET), check_md5=True) as g:
        c = s3_client(url)
        c.create_bucket(Bucket="training")
        small = {k: v for k, v in data.files.items() if k != data.large}
        _parallel(
            lambda kv: c.put_object(Bucket="training", Key=f"{prefix}/{kv[0]}", Body=kv[1]),
            small.items(),
        )
        part = 8 << 20
        import io

        c.upload_fileobj(
            io.BytesIO(data.files[data.large]),
            "training",
            f"{prefix}/{data.large}",
            Config=TransferConfig(multipart_threshold=part, multipart_chunksize=part),
        )
        c.put_object(Bucket="training", Key="sets/v10/not-mine.txt", Body=b"other prefix")
        env = {
            "AWS_ACCESS_KEY_ID": S3_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": g.url,
        }
        yield StoreUnderTest(
            "s3", f"s3://training/{prefix}", env, g, s3_object_read, [S3_SECRET], {"client": c}
        )


# ---------------------------------------------------------------- GCS


def _service_account(tmp: Path) -> tuple[Path, bytes, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    info = {
        "type": "service_account",
        "project_id": "cloudgpu-test",
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": "puller@cloudgpu-test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "http://127.0.0.1:9/token",  # never called: signing is local
    }
    path = tmp / "sa.json"
    path.write_text(json.dumps(info))
    path.chmod(0o600)
    body = pem.split("-----")[2].strip().splitlines()[3]  # a line of the key body
    return path, public, body


@contextmanager
def gcs_store(data: Dataset, tmp: Path, prefix: str = "sets/v1") -> Iterator[StoreUnderTest]:
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{port}"
        sa, public, key_line = _service_account(tmp)
        with gate(url, gcs_verifier(public), check_md5=True) as g:
            c = gcs_client(url)
            bucket = c.create_bucket("training-gs")
            _parallel(
                lambda kv: bucket.blob(f"{prefix}/{kv[0]}").upload_from_string(kv[1]),
                data.files.items(),
            )
            env = {"CLOUDGPU_GCS_ENDPOINT": g.url, "GOOGLE_APPLICATION_CREDENTIALS": str(sa)}
            yield StoreUnderTest(
                "gcs", f"gs://training-gs/{prefix}", env, g, gcs_object_read, [key_line]
            )
    finally:
        server.stop()


# ---------------------------------------------------------------- Azure


def azurite_available() -> bool:
    return AZURITE.exists() and shutil.which("node") is not None


def require_azurite() -> None:
    if azurite_available():
        return
    msg = "Azurite is not installed: run `make install` (npm install in tools/azurite)"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


@contextmanager
def azurite(tmp: Path) -> Iterator[str]:
    port = free_port()
    log = open(tmp / "azurite.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            str(AZURITE),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--silent",
            "--disableTelemetry",
            "--skipApiVersionCheck",
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        cwd=tmp,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None:
                    log_text = (tmp / "azurite.log").read_text()
                    raise RuntimeError(f"azurite exited: {log_text}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def az_connection_string(blob_endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};"
        f"BlobEndpoint={blob_endpoint}/{AZ_ACCOUNT};"
    )


@contextmanager
def azure_store(data: Dataset, tmp: Path, prefix: str = "sets/v1") -> Iterator[StoreUnderTest]:
    from azure.storage.blob import BlobServiceClient

    require_azurite()
    with azurite(tmp) as url, gate(url, lambda *a: None) as g:
        svc = BlobServiceClient.from_connection_string(az_connection_string(url))
        cont = svc.create_container("training")
        _parallel(lambda kv: cont.upload_blob(f"{prefix}/{kv[0]}", kv[1]), data.files.items())
        env = {"AZURE_STORAGE_CONNECTION_STRING": az_connection_string(g.url)}
        yield StoreUnderTest(
            "azure", f"az://{AZ_ACCOUNT}/training/{prefix}", env, g, azure_object_read, [AZ_KEY]
        )


@contextmanager
def store(name: str, data: Dataset, tmp: Path) -> Iterator[StoreUnderTest]:
    if name == "s3":
        with s3_store(data) as s:
            yield s
    elif name == "gcs":
        with gcs_store(data, tmp) as s:
            yield s
    else:
        with azure_store(data, tmp) as s:
            yield s


# ---------------------------------------------------------------- the test's own reads


def direct_read(sut: StoreUnderTest, key: str) -> bytes | None:
    """An object's bytes read by the test itself, past the gate (not in its log); None
    when there is no such object."""
    up = sut.gate.upstream
    if sut.name == "s3":
        c = s3_client(up)
        try:
            return bytes(c.get_object(Bucket="training", Key=key)["Body"].read())
        except c.exceptions.NoSuchKey:
            return None
    if sut.name == "gcs":
        client = gcs_client(up)
        blob = client.bucket("training-gs").get_blob(key)
        return None if blob is None else bytes(blob.download_as_bytes())
    from azure.core.exceptions import ResourceNotFoundError
    from azure.storage.blob import BlobServiceClient

    svc = BlobServiceClient.from_connection_string(az_connection_string(up))
    try:
        return bytes(svc.get_blob_client("training", key).download_blob().readall())
    except ResourceNotFoundError:
        return None


def direct_write(sut: StoreUnderTest, key: str, data: bytes) -> None:
    up = sut.gate.upstream
    if sut.name == "s3":
        c = s3_client(up)
        c.put_object(Bucket="training", Key=key, Body=data)
    elif sut.name == "gcs":
        client = gcs_client(up)
        client.bucket("training-gs").blob(key).upload_from_string(data)
    else:
        from azure.storage.blob import BlobServiceClient

        svc = BlobServiceClient.from_connection_string(az_connection_string(up))
        svc.get_blob_client("training", key).upload_blob(data, overwrite=True)


def bucket_uri(sut: StoreUnderTest, prefix: str) -> str:
    """A destination under the store's test bucket/container."""
    head = sut.uri.split("/sets/v1")[0]
    return f"{head}/{prefix}"
