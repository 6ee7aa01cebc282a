"""Google Cloud Storage: list with google-cloud-storage, sign V4 GET URLs.

Integrity: ``md5Hash`` for ordinary objects, ``crc32c`` for composite ones (which have
no MD5); the generation is the object's identity. Signing needs a service-account key:
``GOOGLE_APPLICATION_CREDENTIALS`` naming a key file (the V4 RSA signature is made
here, no network call). ``STORAGE_EMULATOR_HOST`` (or ``CLOUDGPU_GCS_ENDPOINT``) points
at another endpoint, e.g. gcp-storage-emulator in the tests; listing there is anonymous.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from cloudgpu.data.objects import RemoteObject
from cloudgpu.data.uri import Source, relative
from cloudgpu.errors import AuthError, CloudGPUError, NotFoundError, TransientError

PUBLIC_ENDPOINT = "https://storage.googleapis.com"


class GCSStore:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._client: Any = None
        self._signer: Any = None

    def notes(self) -> list[str]:
        return []

    def endpoint(self) -> str | None:
        host = self.env.get("CLOUDGPU_GCS_ENDPOINT") or self.env.get("STORAGE_EMULATOR_HOST")
        if host and "://" not in host:
            host = f"http://{host}"
        return host.rstrip("/") if host else None

    def client(self) -> Any:
        if self._client is None:
            from google.auth.credentials import AnonymousCredentials  # lazy SDK
            from google.cloud import storage  # type: ignore[attr-defined]

            endpoint = self.endpoint()
            if endpoint:
                self._client = storage.Client(
                    project=self.env.get("GOOGLE_CLOUD_PROJECT") or "cloudgpu",
                    credentials=AnonymousCredentials(),
                    client_options={"api_endpoint": endpoint},
                )
            else:
                self._client = storage.Client(credentials=self.signer())
        return self._client

    def signer(self) -> Any:
        if self._signer is None:
            from google.oauth2 import service_account  # lazy SDK

            key = self.env.get("GOOGLE_APPLICATION_CREDENTIALS")
            if not key:
                raise AuthError(
                    "gs:// sources need a service-account key to sign URLs with",
                    provider="gcs",
                    hint="set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file "
                    "with storage.objects.get on the bucket",
                )
            try:
                self._signer = service_account.Credentials.from_service_account_file(
                    key, scopes=["https://www.googleapis.com/auth/devstorage.read_write"]
                )
            except (OSError, ValueError, KeyError) as exc:
                raise AuthError(
                    f"GOOGLE_APPLICATION_CREDENTIALS: not a usable service-account key ({exc})",
                    provider="gcs",
                ) from None
        return self._signer

    def list_objects(self, src: Source) -> list[RemoteObject]:
        from google.api_core import exceptions as gexc  # lazy SDK

        out = []
        try:
            for blob in self.client().list_blobs(src.bucket, prefix=src.prefix or None):
                rel = relative(blob.name, src.prefix)
                if rel is not None:
                    out.append(_object(blob, rel))
        except gexc.GoogleAPICallError as exc:
            raise map_error(str(src), exc) from exc
        except (OSError, gexc.RetryError) as exc:
            raise TransientError(f"{src}: {exc}", provider="gcs") from exc
        if not out:
            raise NotFoundError(f"{src}: no objects there", provider="gcs")
        return out

    def sign_get(self, src: Source, objects: Sequence[RemoteObject], ttl_s: int) -> list[str]:
        bucket = self.client().bucket(src.bucket)
        creds = self.signer()
        endpoint = self.endpoint() or PUBLIC_ENDPOINT
        expires = datetime.timedelta(seconds=min(ttl_s, 7 * 24 * 3600))
        return [
            bucket.blob(o.key).generate_signed_url(
                version="v4",
                expiration=expires,
                method="GET",
                credentials=creds,
                api_access_endpoint=endpoint,
            )
            for o in objects
        ]


def _object(blob: Any, rel: str) -> RemoteObject:
    check: dict[str, Any] = {}
    if blob.md5_hash:
        check = {"md5": base64.b64decode(blob.md5_hash).hex()}
    elif blob.crc32c:
        check = {"crc32c": blob.crc32c}
    mtime = blob.updated.timestamp() if blob.updated else None
    return RemoteObject(blob.name, rel, int(blob.size or 0), str(blob.generation), check, mtime)


def map_error(what: str, exc: Any) -> CloudGPUError:
    code = getattr(exc, "code", None)
    if code in (401, 403):
        return AuthError(f"{what}: access denied ({exc.message})", provider="gcs")
    if code == 404:
        return NotFoundError(f"{what}: not found ({exc.message})", provider="gcs")
    return TransientError(f"{what}: GCS error {code}", provider="gcs")
