"""Reading a file the user pointed at (a job file, config.toml): safely, once.

Only regular files are read: a FIFO would block forever and a device could be endless,
so the file is opened without blocking and refused unless it is a regular file. Reads
are bounded, and the text must be UTF-8 (the error names the line of the first bad
byte). Callers wrap :class:`UnreadableFile` into their own located error.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class UnreadableFile(ValueError):
    """The file cannot be used; ``line`` is set for a decoding problem."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        hint: str | None = None,
        missing: bool = False,
    ) -> None:
        super().__init__(message)
        self.line = line
        self.hint = hint
        self.missing = missing


def read_user_text(path: Path, what: str, max_bytes: int) -> str:
    """The UTF-8 text of ``path``; UnreadableFile (naming ``what``) when it is missing, not
    a regular file, larger than ``max_bytes``, unreadable or not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UnreadableFile(f"{what} not found", missing=True) from None
    except OSError as exc:
        raise UnreadableFile(f"cannot read {what}: {_why(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise UnreadableFile(f"cannot read {what}: {kind} (a FIFO or device is refused)")
        if st.st_size > max_bytes:
            raise UnreadableFile(
                f"{what} is too large ({st.st_size:,} bytes; at most {max_bytes:,})"
            )
        raw = _read(fd, max_bytes + 1)
    except OSError as exc:
        raise UnreadableFile(f"cannot read {what}: {_why(exc)}") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise UnreadableFile(f"{what} is too large (more than {max_bytes:,} bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UnreadableFile(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x})",
            line=line,
            hint="save the file as UTF-8",
        ) from None


def _read(fd: int, limit: int) -> bytes:
    chunks = []
    got = 0
    while got < limit:
        chunk = os.read(fd, min(1 << 20, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return exc.strerror or str(exc)
