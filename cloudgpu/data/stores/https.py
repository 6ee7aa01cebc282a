"""One object at an ``https://`` URL (public, or already signed by its owner).

The client asks for its size and validators with a HEAD (no body is read); the URL goes
to the instance as given. Integrity: ``Content-MD5`` when the server sends it, else the
size, with the ETag (or Last-Modified) as the identity that resume and skip compare.
"""

from __future__ import annotations

import base64
import binascii
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

from cloudgpu.data.instance import CA_FILE_ENV
from cloudgpu.data.objects import RemoteObject
from cloudgpu.data.uri import Source
from cloudgpu.errors import AuthError, ConfigError, NotFoundError, TransientError

HEAD_TIMEOUT_S = 30


class HttpsStore:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._notes: list[str] = []

    def notes(self) -> list[str]:
        return list(self._notes)

    def list_objects(self, src: Source) -> list[RemoteObject]:
        req = urllib.request.Request(src.url, method="HEAD")
        tls = ssl.create_default_context()
        if self.env.get(CA_FILE_ENV):  # a private CA, trusted here and on the instance
            tls.load_verify_locations(cafile=self.env[CA_FILE_ENV])
        try:
            with urllib.request.urlopen(req, timeout=HEAD_TIMEOUT_S, context=tls) as resp:
                headers = resp.headers
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise AuthError(
                    f"{src}: access denied (HTTP {exc.code})", provider="https"
                ) from None
            if exc.code == 404:
                raise NotFoundError(f"{src}: not found", provider="https") from None
            raise TransientError(f"{src}: HTTP {exc.code}", provider="https") from None
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(getattr(exc, "reason", exc), ssl.SSLCertVerificationError):
                raise ConfigError(
                    f"{src}: TLS certificate not trusted ({getattr(exc, 'reason', exc)})",
                    hint=f"a private CA? set {CA_FILE_ENV} to its certificate (PEM); "
                    "verification is never turned off",
                ) from None
            raise TransientError(f"{src}: {exc}", provider="https") from None
        size = headers.get("Content-Length")
        if size is None or not size.isdigit():
            raise NotFoundError(f"{src}: the server gives no Content-Length", provider="https")
        name = src.prefix.rsplit("/", 1)[-1]
        return [
            RemoteObject(
                src.prefix, name, int(size), _identity(headers), _check(headers), _mtime(headers)
            )
        ]

    def sign_get(self, src: Source, objects: Sequence[RemoteObject], ttl_s: int) -> list[str]:
        return [src.url for _ in objects]


def _check(headers: Any) -> dict[str, Any]:
    md5 = headers.get("Content-MD5")
    if not md5:
        return {}
    try:
        return {"md5": base64.b64decode(md5, validate=True).hex()}
    except (binascii.Error, ValueError):
        return {}


def _identity(headers: Any) -> str:
    return str(headers.get("ETag") or headers.get("Last-Modified") or "")


def _mtime(headers: Any) -> float | None:
    try:
        return parsedate_to_datetime(headers["Last-Modified"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None
