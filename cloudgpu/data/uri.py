"""Remote data sources: ``s3://BUCKET/PREFIX``, ``gs://BUCKET/PREFIX``,
``az://ACCOUNT/CONTAINER/PREFIX`` and ``https://HOST/PATH`` (one object)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

SCHEMES = ("s3", "gs", "az", "https")
_BUCKET = {
    "s3": re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$"),
    "gs": re.compile(r"^[a-z0-9][a-z0-9._\-]{1,220}[a-z0-9]$"),
    "az": re.compile(r"^[a-z0-9](?!.*--)[a-z0-9\-]{1,61}[a-z0-9]$"),
}
_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")


@dataclass(frozen=True)
class Source:
    """A parsed remote source. ``bucket`` is the S3/GCS bucket or the Azure container."""

    scheme: str
    bucket: str
    prefix: str  # no leading "/"; "" for the whole bucket
    account: str = ""  # Azure storage account
    url: str = ""  # https:// sources: the URL itself

    def __str__(self) -> str:
        if self.scheme == "https":
            return self.url.split("?", 1)[0]  # a query may hold a SAS/signature
        where = f"{self.account}/{self.bucket}" if self.account else self.bucket
        return f"{self.scheme}://{where}" + (f"/{self.prefix}" if self.prefix else "")


def is_remote(src: str) -> bool:
    return src.split("://", 1)[0] in SCHEMES and "://" in src


def parse(src: str) -> Source:
    """Parse ``src``; ValueError (saying the expected form) when it is malformed."""
    scheme, sep, rest = src.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"expected one of {', '.join(s + '://' for s in SCHEMES)}, got {src!r}")
    if scheme == "https":
        parts = urlsplit(src)
        if not parts.hostname or not parts.path.strip("/"):
            raise ValueError("expected https://HOST/PATH of one object")
        return Source("https", parts.hostname, parts.path.lstrip("/"), url=src)
    segs = rest.split("/")
    if scheme == "az":
        if len(segs) < 2 or not _ACCOUNT.match(segs[0]) or not _BUCKET["az"].match(segs[1]):
            raise ValueError(
                "expected az://ACCOUNT/CONTAINER[/PREFIX] (account: 3-24 lowercase letters "
                "and digits; container: 3-63 lowercase letters, digits and '-')"
            )
        return Source("az", segs[1], "/".join(segs[2:]), account=segs[0])
    if not _BUCKET[scheme].match(segs[0]):
        raise ValueError(f"expected {scheme}://BUCKET[/PREFIX] with a valid bucket name")
    prefix = "/".join(segs[1:])
    if "//" in prefix or prefix.startswith("/"):
        raise ValueError(f"expected {scheme}://BUCKET[/PREFIX] without empty path segments")
    return Source(scheme, segs[0], prefix)


def relative(key: str, prefix: str) -> str | None:
    """``key``'s path under ``prefix`` (a directory-like prefix), or None when the key is
    not a file under it. ``s3://b/data`` covers ``data/x`` and ``data`` itself, never
    ``database/x``."""
    if not prefix:
        rel = key
    elif key == prefix:
        rel = key.rsplit("/", 1)[-1]
    elif key.startswith(prefix.rstrip("/") + "/"):
        rel = key[len(prefix.rstrip("/")) + 1 :]
    else:
        return None
    if not rel or rel.endswith("/"):
        return None  # "directory" marker objects
    return rel


def safe_rel(rel: str) -> bool:
    """Whether an object's relative path can be written under a destination as is."""
    parts = rel.split("/")
    return (
        len(rel.encode()) <= 4096
        and "\x00" not in rel
        and not rel.startswith("/")
        and all(p not in ("", ".", "..") and len(p.encode()) <= 255 for p in parts)
        and not parts[-1].endswith(".cloudgpu-part")
    )
