"""Google Cloud Storage: list with google-cloud-storage, sign V4 URLs for reads and writes.

Integrity: ``md5Hash`` for ordinary objects, ``crc32c`` for composite ones (which have
no MD5); the generation is the object's identity. Signing needs a service-account key:
``GOOGLE_APPLICATION_CREDENTIALS`` naming a key file (the V4 RSA signature is made
here, no network call). ``STORAGE_EMULATOR_HOST`` (or ``CLOUDGPU_GCS_ENDPOINT``) points
at another endpoint, e.g. gcp-storage-emulator in the tests; listing there is anonymous.

Uploads: a V4 signed PUT (XML API) whose signature covers Content-MD5, so GCS stores
exactly the scanned bytes or refuses them; for large files a resumable session that the
client opens (one metadata call, the object's md5Hash in its metadata so GCS checks the
whole upload) and whose session URI alone goes to the instance, as Google documents for
handing an upload to an untrusted party
(https://cloud.google.com/storage/docs/performing-resumable-uploads). The object
appears when the last chunk arrives; a session's chunks go in order, one stream per
object (many objects at once).
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from cloudgpu.data.objects import LocalFile, RemoteObject, join_key
from cloudgpu.data.uri import Source, relative
from cloudgpu.errors import AuthError, CloudGPUError, NotFoundError, TransientError

PUBLIC_ENDPOINT = "https://storage.googleapis.com"


class GCSStore:
    max_parts = 10_000  # chunks per resumable upload: bounds the requests, not a GCS limit

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

    def sign_put(
        self, dest: Source, files: Sequence[LocalFile], ttl_s: int
    ) -> list[dict[str, Any]]:
        from google.api_core import exceptions as gexc  # lazy SDK

        bucket = self.client().bucket(dest.bucket)
        creds = self.signer()
        endpoint = self.endpoint() or PUBLIC_ENDPOINT
        expires = datetime.timedelta(seconds=min(ttl_s, 7 * 24 * 3600))
        out: list[dict[str, Any]] = []
        try:
            for f in files:
                blob = bucket.blob(join_key(dest.prefix, f.rel))
                if not f.parts:
                    url = blob.generate_signed_url(
                        version="v4",
                        expiration=expires,
                        method="PUT",
                        content_md5=f.md5_b64,
                        credentials=creds,
                        api_access_endpoint=endpoint,
                    )
                    out.append({"how": "put", "url": url, "headers": {"Content-MD5": f.md5_b64}})
                    continue
                blob.md5_hash = f.md5_b64  # GCS refuses the finished upload if it differs
                session = blob.create_resumable_upload_session(size=f.size, checksum=None)
                out.append({"how": "gcs-resumable", "url": session, "part_size": f.part_size})
        except gexc.GoogleAPICallError as exc:
            raise map_error(str(dest), exc) from exc
        except (OSError, gexc.RetryError) as exc:
            raise TransientError(f"{dest}: {exc}", provider="gcs") from exc
        return out


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
