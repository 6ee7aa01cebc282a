"""The object and store types shared by the store modules, the pull and the push."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cloudgpu.data.uri import Source


@dataclass(frozen=True)
class RemoteObject:
    """One object to fetch. ``check`` is what the puller verifies it against:
    ``{"md5": hex}``, ``{"s3etag": "hex-N", "part_size": n}``, ``{"crc32c": b64}`` or
    ``{}`` (size only, when the store keeps no usable checksum)."""

    key: str
    rel: str  # path under the destination
    size: int
    id: str  # the store's identity of this version (ETag, generation): resume + skip
    check: Mapping[str, Any] = field(default_factory=dict)
    mtime: float | None = None


@dataclass(frozen=True)
class LocalFile:
    """One file of an instance's tree to upload, as the instance's scan reported it."""

    rel: str
    size: int
    mtime: float
    md5: str  # hex MD5 of the whole file
    part_size: int
    parts: tuple[str, ...] = ()  # hex MD5 of each part; () when it goes in one request

    @property
    def md5_b64(self) -> str:
        return base64.b64encode(bytes.fromhex(self.md5)).decode()

    def part_length(self, i: int) -> int:
        return min(self.part_size, self.size - i * self.part_size)

    def multipart_etag(self) -> str:
        """The ETag S3 gives an object uploaded in exactly these parts."""
        joined = b"".join(bytes.fromhex(p) for p in self.parts)
        return f"{hashlib.md5(joined).hexdigest()}-{len(self.parts)}"

    def matches(self, obj: RemoteObject) -> bool:
        """Whether the store's ``obj`` already holds this file's bytes (same size and
        checksum); without a checksum to compare, it does not count as the same."""
        if obj.size != self.size:
            return False
        if "md5" in obj.check:
            return obj.check["md5"] == self.md5
        if "s3etag" in obj.check:
            return bool(self.parts) and obj.check["s3etag"] == self.multipart_etag()
        return False


def join_key(prefix: str, rel: str) -> str:
    return f"{prefix.rstrip('/')}/{rel}" if prefix else rel


class Store(Protocol):
    def list_objects(self, src: Source) -> list[RemoteObject]:
        """Every object under ``src`` with its relative path (directory markers left
        out); NotFoundError when there is none."""
        ...

    def sign_get(self, src: Source, objects: Sequence[RemoteObject], ttl_s: int) -> list[str]:
        """One GET URL per object, valid ``ttl_s`` seconds, granting nothing else."""
        ...

    def notes(self) -> list[str]:
        """What the listing noticed (e.g. checksums the store cannot give)."""
        ...


class Destination(Store, Protocol):
    """A store the instance can upload to (s3, gs, az)."""

    max_parts: int  # most parts one object may have (S3 10,000; Azure 50,000 blocks)

    def sign_put(
        self, dest: Source, files: Sequence[LocalFile], ttl_s: int
    ) -> list[dict[str, Any]]:
        """How the instance uploads each file (cloudgpu/remote/pusher.py's manifest
        entries: ``how`` put | s3-parts | az-blocks | gcs-resumable, with their URLs,
        headers and parts); URLs valid ``ttl_s`` seconds, each for one object. Parts a
        killed upload already sent are marked ``done`` so they are not sent again."""
        ...
