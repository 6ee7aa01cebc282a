"""Small files written so that a crash never leaves half of one: write a temp file beside
the target, then rename over it (atomic on POSIX). Readers see the old file or the new
one. Used for records the lifecycle and providers keep on disk; never for secrets."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (its directory must exist); the file is
    the owner's only (0600), like every state file cloudgpu keeps."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_private(path: Path) -> BinaryIO:
    """``path`` opened for appending, created owner-only (0600; an existing file is made
    so): job logs may hold what a job printed about itself."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab", buffering=0)


def write_json(path: Path, data: Mapping[str, Any], **dumps: Any) -> None:
    write_text(path, json.dumps(data, **dumps))


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
