"""Azure Blob Storage: list with azure-storage-blob, sign one read-only SAS per blob.

``az://ACCOUNT/CONTAINER/PREFIX``. Credentials: ``AZURE_STORAGE_CONNECTION_STRING``
(account key: an account-key service SAS is signed here; also how the tests reach
Azurite) or, without it, DefaultAzureCredential and a user-delegation key (one call,
valid for the staging window) for user-delegation SAS tokens, so no account key is
needed at all. Integrity: the blob's Content-MD5 when the uploader set one (the SDKs do
for single-shot uploads); otherwise size and ETag identity only.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from cloudgpu.data.objects import RemoteObject
from cloudgpu.data.uri import Source, relative
from cloudgpu.errors import AuthError, CloudGPUError, NotFoundError, TransientError


class AzureStore:
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
        from azure.storage.blob import BlobSasPermissions, generate_blob_sas  # lazy SDK

        service = self.service(src.account)
        now = datetime.datetime.now(datetime.UTC)
        # A few minutes' slack either side: the instance's clock may differ from ours.
        start, expiry = now - datetime.timedelta(minutes=5), now + datetime.timedelta(seconds=ttl_s)
        key: dict[str, Any] = {"account_key": service.credential.account_key}
        if not hasattr(service.credential, "account_key"):
            key = {"user_delegation_key": service.get_user_delegation_key(start, expiry)}
        base = service.url.rstrip("/")
        urls = []
        for o in objects:
            sas = generate_blob_sas(
                service.account_name,
                src.bucket,
                o.key,
                permission=BlobSasPermissions(read=True),
                start=start,
                expiry=expiry,
                protocol="https,http" if base.startswith("http://") else "https",
                **key,
            )
            urls.append(f"{base}/{src.bucket}/{quote(o.key, safe='/~')}?{sas}")
        return urls


def map_error(what: str, exc: Any) -> CloudGPUError:
    status = getattr(exc, "status_code", None)
    code = getattr(exc, "error_code", None) or ""
    if status in (401, 403):
        return AuthError(f"{what}: access denied ({code})", provider="azure")
    if status == 404:
        return NotFoundError(f"{what}: not found ({code})", provider="azure")
    return TransientError(f"{what}: Azure error {status} {code}", provider="azure")
