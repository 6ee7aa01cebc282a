"""Files the user pointed at: reading a job file or config.toml, writing a report.

Reading: only regular files are read: a FIFO would block forever and a device could be
endless, so the file is opened without blocking and refused unless it is a regular file.
Reads are bounded, and the text must be UTF-8 (the error names the line of the first bad
byte). Callers wrap :class:`UnreadableFile` into their own located error.

Writing (:func:`write_user_file`) does what the user asked for the path they gave: a
regular file (or a new one) is replaced atomically (a temp file beside it, then a
rename, so a failed run never leaves half a report); a symlink the user named is
written through (its target is replaced, the link stays); a FIFO, terminal or device
(``/dev/stdout``, ``/dev/null``) is opened and written in place, never replaced by a
regular file. A directory, or a path whose directory is missing, is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class UnwritableFile(ValueError):
    """The output path cannot be written; the message says why."""


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


def write_user_file(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` as described above; True when a regular file was
    written (False: a FIFO/device got the bytes). UnwritableFile says why not."""
    data = text.encode("utf-8")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UnwritableFile(_why(exc)) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UnwritableFile("is a directory")
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(path, "wb") as fh:  # a FIFO, tty or device: write in place
                fh.write(data)
            return False
        _replace(target, data, None if st is None else stat.S_IMODE(st.st_mode))
    except OSError as exc:
        raise UnwritableFile(_why(exc)) from None
    return True


def _replace(target: Path, data: bytes, mode: int | None) -> None:
    parent = target.parent
    if not parent.is_dir():
        raise UnwritableFile(f"directory {parent} does not exist")
    tmp = parent / f".{target.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)  # keep the mode of the file being replaced
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
