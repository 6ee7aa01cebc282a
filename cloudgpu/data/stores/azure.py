"""Azure Blob Storage: list with azure-storage-blob, sign one SAS per blob.

``az://ACCOUNT/CONTAINER/PREFIX``. Credentials: ``AZURE_STORAGE_CONNECTION_STRING``
(account key: an account-key service SAS is signed here; also how the tests reach
Azurite) or, without it, DefaultAzureCredential and a user-delegation key (one call,
valid for the staging window) for user-delegation SAS tokens, so no account key is
needed at all. Integrity: the blob's Content-MD5 when the uploader set one (the SDKs do
for single-shot uploads); otherwise size and ETag identity only.

Uploads: a create+write SAS per blob. Up to the part size one Put Blob with Content-MD5
(Azure refuses other bytes); above it Put Block per part (each with its Content-MD5,
its block id naming the part's index and MD5) and one Put Block List that commits them
and sets the blob's Content-MD5: the blob changes only at that commit. Blocks a killed
upload left uncommitted are found by their ids and not sent again.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from cloudgpu.data.objects import LocalFile, RemoteObject, join_key
from cloudgpu.data.uri import Source, relative
from cloudgpu.errors import AuthError, CloudGPUError, NotFoundError, TransientError


class AzureStore:
    # https://learn.microsoft.com/rest/api/storageservices/understanding-block-blobs--append-blobs--and-page-blobs
    max_parts = 50_000

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._service: Any = None
        self._no_md5 = 0

    def notes(self) -> list[str]:
        if not self._no_md5:
            return []
        return [f"{self._no_md5} blob(s) have no Content-MD5: checked by size and ETag only"]

    def service(self, account: str) -> Any:
        if self._service is None:
            from azure.storage.blob import BlobServiceClient  # lazy SDK

            conn = self.env.get("AZURE_STORAGE_CONNECTION_STRING")
            if conn:
                self._service = BlobServiceClient.from_connection_string(conn)
            else:
                from azure.identity import DefaultAzureCredential

                self._service = BlobServiceClient(
                    f"https://{account}.blob.core.windows.net", credential=DefaultAzureCredential()
                )
            if self._service.account_name != account:
                raise AuthError(
                    f"az://{account}: AZURE_STORAGE_CONNECTION_STRING is for account "
                    f"{self._service.account_name}",
                    provider="azure",
                )
        return self._service

    def list_objects(self, src: Source) -> list[RemoteObject]:
        from azure.core import exceptions as aexc  # lazy SDK

        container = self.service(src.account).get_container_client(src.bucket)
        out = []
        try:
            for b in container.list_blobs(name_starts_with=src.prefix or None):
                rel = relative(b.name, src.prefix)
                if rel is not None:
                    out.append(self._object(b, rel))
        except aexc.HttpResponseError as exc:
            raise map_error(str(src), exc) from exc
        except aexc.ServiceRequestError as exc:
            raise TransientError(f"{src}: {exc}", provider="azure") from exc
        if not out:
            raise NotFoundError(f"{src}: no objects there", provider="azure")
        return out

    def _object(self, b: Any, rel: str) -> RemoteObject:
        md5 = b.content_settings.content_md5 if b.content_settings else None
        check = {"md5": bytes(md5).hex()} if md5 else {}
        if not md5:
            self._no_md5 += 1
        mtime = b.last_modified.timestamp() if b.last_modified else None
        return RemoteObject(b.name, rel, int(b.size), str(b.etag).strip('"'), check, mtime)

    def sign_get(self, src: Source, objects: Sequence[RemoteObject], ttl_s: int) -> list[str]:
        return self._sas_urls(src, [o.key for o in objects], ttl_s, write=False)

    def _sas_urls(self, src: Source, keys: Sequence[str], ttl_s: int, *, write: bool) -> list[str]:
        from azure.storage.blob import BlobSasPermissions, generate_blob_sas  # lazy SDK

        service = self.service(src.account)
        now = datetime.datetime.now(datetime.UTC)
        # A few minutes' slack either side: the instance's clock may differ from ours.
        start, expiry = now - datetime.timedelta(minutes=5), now + datetime.timedelta(seconds=ttl_s)
        key: dict[str, Any] = {"account_key": service.credential.account_key}
        if not hasattr(service.credential, "account_key"):
            key = {"user_delegation_key": service.get_user_delegation_key(start, expiry)}
        base = service.url.rstrip("/")
        perm = (
            BlobSasPermissions(create=True, write=True) if write else BlobSasPermissions(read=True)
        )
        urls = []
        for k in keys:
            sas = generate_blob_sas(
                service.account_name,
                src.bucket,
                k,
                permission=perm,
                start=start,
                expiry=expiry,
                protocol="https,http" if base.startswith("http://") else "https",
                **key,
            )
            urls.append(f"{base}/{src.bucket}/{quote(k, safe='/~')}?{sas}")
        return urls

    def sign_put(
        self, dest: Source, files: Sequence[LocalFile], ttl_s: int
    ) -> list[dict[str, Any]]:
        from azure.core import exceptions as aexc  # lazy SDK

        keys = [join_key(dest.prefix, f.rel) for f in files]
        urls = self._sas_urls(dest, keys, ttl_s, write=True)
        container = self.service(dest.account).get_container_client(dest.bucket)
        out: list[dict[str, Any]] = []
        try:
            for f, k, url in zip(files, keys, urls, strict=True):
                if not f.parts:
                    headers = {"Content-MD5": f.md5_b64, "x-ms-blob-type": "BlockBlob"}
                    out.append({"how": "put", "url": url, "headers": headers})
                    continue
                held = self._uncommitted(container.get_blob_client(k))
                parts = []
                for i, md5 in enumerate(f.parts):
                    block = block_id(i, md5)
                    parts.append(
                        {
                            "url": f"{url}&comp=block&blockid={quote(block, safe='')}",
                            "md5": md5,
                            "id": block,
                            "done": "held" if block in held else None,
                        }
                    )
                out.append(
                    {"how": "az-blocks", "parts": parts, "complete": f"{url}&comp=blocklist"}
                )
        except aexc.HttpResponseError as exc:
            raise map_error(str(dest), exc) from exc
        except aexc.ServiceRequestError as exc:
            raise TransientError(f"{dest}: {exc}", provider="azure") from exc
        return out

    def _uncommitted(self, blob: Any) -> set[str]:
        """Ids of the blocks a killed upload left uncommitted on ``blob``."""
        from azure.core import exceptions as aexc  # lazy SDK

        try:
            _committed, uncommitted = blob.get_block_list("uncommitted")
        except aexc.ResourceNotFoundError:
            return set()
        # The SDK hands ids back base64-decoded (as text when they are text).
        return {base64.b64encode(str(b.id).encode()).decode() for b in uncommitted}


def block_id(index: int, md5: str) -> str:
    """A block's id: its index and MD5 (every id of a blob has the same length), so a
    block found uncommitted is known to hold exactly that part."""
    return base64.b64encode(f"cloudgpu-{index:05d}-{md5}".encode()).decode()


def map_error(what: str, exc: Any) -> CloudGPUError:
    status = getattr(exc, "status_code", None)
    code = getattr(exc, "error_code", None) or ""
    if status in (401, 403):
        return AuthError(f"{what}: access denied ({code})", provider="azure")
    if status == 404:
        return NotFoundError(f"{what}: not found ({code})", provider="azure")
    return TransientError(f"{what}: Azure error {status} {code}", provider="azure")
