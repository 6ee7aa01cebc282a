"""Small files written so that a crash never leaves half of one: write a temp file beside
the target, then rename over it (atomic on POSIX). Readers see the old file or the new
one. Used for records the lifecycle and providers keep on disk; never for secrets."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (its directory must exist)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Mapping[str, Any], **dumps: Any) -> None:
    write_text(path, json.dumps(data, **dumps))


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
