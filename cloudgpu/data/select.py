"""Which files of a data source to move: ``exclude:`` patterns and ``.cloudgpuignore``.

Both use the gitignore syntax (https://git-scm.com/docs/gitignore#_pattern_format), one
matcher for local trees and object listings alike: ``#`` comments, ``!`` re-includes,
a trailing ``/`` matches directories only, a ``/`` at the start or in the middle anchors
the pattern to the source's root (else it matches at any depth), ``*`` and ``?`` stay
within one path segment, ``**`` spans segments, ``[...]`` is a character class. As in git,
a file inside an excluded directory cannot be re-included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILE = ".cloudgpuignore"
MAX_IGNORE_BYTES = 1 << 20


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _translate(glob: str) -> str:
    out, i, n = [], 0, len(glob)
    while i < n:
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = glob.find("]", i + 2)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = glob[i + 1 : j].replace("\\", "\\\\")
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"(?!/)[{body}]")
            i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _rule(line: str) -> _Rule | None:
    text = line.rstrip("\n")
    if not text.endswith("\\ "):
        text = text.rstrip(" ")
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    if negate:
        text = text[1:]
    if text.startswith("\\"):
        text = text[1:]
    dir_only = text.endswith("/")
    text = text.rstrip("/")
    if not text:
        return None
    anchored = "/" in text
    body = _translate(text.lstrip("/"))
    regex = ("^" if anchored else "^(?:.*/)?") + body + "$"
    return _Rule(re.compile(regex, re.DOTALL), negate, dir_only)


class Selector:
    """Decides, for a path relative to a source's root, whether it is excluded."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self._rules = [r for r in (_rule(p) for p in patterns) if r is not None]

    def __bool__(self) -> bool:
        return bool(self._rules)

    def _hit(self, path: str, is_dir: bool) -> bool:
        excluded = False
        for r in self._rules:
            if r.dir_only and not is_dir:
                continue
            if r.regex.match(path):
                excluded = not r.negate
        return excluded

    def excluded(self, rel: str, is_dir: bool = False) -> bool:
        """Whether ``rel`` (``a/b/c.txt``) is excluded, itself or through a parent dir."""
        if not self._rules:
            return False
        parts = rel.strip("/").split("/")
        for i in range(1, len(parts)):
            if self._hit("/".join(parts[:i]), True):
                return True
        return self._hit("/".join(parts), is_dir)


def read_ignore_file(path: Path) -> list[str]:
    """The lines of a .cloudgpuignore file; [] when there is none. A file that is too
    large or not text raises ValueError (named by the caller)."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_IGNORE_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_IGNORE_BYTES:
        raise ValueError(f"{path}: larger than 1 MiB; expected a short list of patterns")
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; expected gitignore patterns") from None


def selector_for(
    exclude: Sequence[str], job_dir: Path | None, source_dir: Path | None = None
) -> Selector:
    """The patterns for one data source: the job directory's .cloudgpuignore, a local
    source's own .cloudgpuignore, then the item's ``exclude:`` list (later rules win)."""
    lines: list[str] = []
    for d in (job_dir, source_dir):
        if d is not None:
            lines += read_ignore_file(d / IGNORE_FILE)
    return Selector([*lines, *exclude])
