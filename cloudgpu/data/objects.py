"""The object and store types shared by the store modules and the pull."""

from __future__ import annotations

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
