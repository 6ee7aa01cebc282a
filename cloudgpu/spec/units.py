"""Parsers for the small value languages of cloudgpu's inputs: sizes, durations, counts,
GPU requests. One grammar each, used by job files, config files and command-line flags
alike (``--since 10m`` means ten minutes, as ``idle_timeout: 10m`` does).

Each parser takes the user's value and returns a plain number or GpuRequest, or raises
ValueError whose text names the expected form; callers add file, line and key. Each
grammar also has a regex (``*_PATTERN``) that the JSON Schema carries, written to accept
exactly what the parser accepts. Nothing here reads files or knows the YAML layout.
"""

from __future__ import annotations

import math
import re

from cloudgpu.spec.fields import Unchecked
from cloudgpu.spec.fields import shown as _shown
from cloudgpu.spec.model import GpuRequest

SIZE_FORM = 'a size like "500GB", "1.5TB" or "64GiB" (a trailing "+" means "at least")'
DURATION_FORM = 'a duration like "90s", "10m", "6h", "1d", "2w" or "1h30m"'
GPU_FORM = (
    'a GPU like "A100-80GB:8", "H100", "H100:2", "H100:4+", "24GB+", "24GB+:4", "any", '
    '"any:2" or "none"'
)
COUNT_FORM = 'a number like 16 or "16+" (at least 16)'
AMOUNT_FORM = "a count like 2B, 500M, 1.5T or 8e9"
BYTES_FORM = "a size like 200GB, 110KB or 512MiB"
MAX_GPUS = 999  # per machine: more is a typo

# Decimal and binary units, in GB (10^9 bytes): clouds quote GB, Linux tools GiB.
_SIZE_UNITS = {
    "": 1.0,
    "B": 1e-9,
    "KB": 1e-6,
    "MB": 1e-3,
    "GB": 1.0,
    "TB": 1e3,
    "PB": 1e6,
    "KIB": 1024 / 1e9,
    "MIB": 1024**2 / 1e9,
    "GIB": 1024**3 / 1e9,
    "TIB": 1024**4 / 1e9,
    "K": 1e-6,
    "M": 1e-3,
    "G": 1.0,
    "T": 1e3,
}
_DURATION_UNITS = {"w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_AMOUNT_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_BYTE_UNITS = {
    "": 1.0,
    "B": 1.0,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "PB": 1e15,
    "KIB": 2.0**10,
    "MIB": 2.0**20,
    "GIB": 2.0**30,
    "TIB": 2.0**40,
}


def _ci_alternatives(words: list[str]) -> str:
    """Case-insensitive regex alternatives (JSON Schema regexes have no (?i) flag)."""
    longest_first = sorted((w for w in words if w), key=len, reverse=True)
    return "|".join("".join(f"[{c}{c.lower()}]" for c in w) for w in longest_first)


_NUM = r"\d+(?:\.\d+)?"
SIZE_PATTERN = rf"^\s*{_NUM}\s*(?:{_ci_alternatives(list(_SIZE_UNITS))})?\s*\+?\s*$"
DURATION_PATTERN = rf"^\s*(?:{_NUM}\s*[wdhmsWDHMS]\s*)+$"
COUNT_PATTERN = rf"^\s*{_NUM}\s*\+?\s*$"
AMOUNT_PATTERN = rf"^\s*\d*\.?\d+(?:[eE]\d+)?\s*(?:{_ci_alternatives(list(_AMOUNT_SUFFIX))})?\s*$"
BYTES_PATTERN = rf"^\s*\d*\.?\d+\s*(?:{_ci_alternatives(list(_BYTE_UNITS))})?\s*$"
_GPU_COUNT = r"(?::[1-9]\d{0,2}\+?)?"
GPU_PATTERN = (
    r"^\s*(?:[Nn][Oo][Nn][Ee]|[Cc][Pp][Uu]"
    rf"|[Aa][Nn][Yy]{_GPU_COUNT}"
    rf"|{_NUM}\s*(?:{_ci_alternatives(list(_SIZE_UNITS))})?\s*\+{_GPU_COUNT}"
    rf"|(?![Nn][Oo][Nn][Ee]:|[Cc][Pp][Uu]:)[A-Za-z][A-Za-z0-9._ -]*{_GPU_COUNT})\s*$"
)

_SIZE_RE = re.compile(SIZE_PATTERN)
_SIZE_PARTS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*(\+?)\s*$")
_DURATION_RE = re.compile(DURATION_PATTERN)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([wdhms])")
_COUNT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(\+?)\s*$")
_AMOUNT_RE = re.compile(r"^\s*(\d*\.?\d+(?:e\d+)?)\s*([kmbgt]?)\s*$", re.I)
_BYTES_RE = re.compile(r"^\s*(\d*\.?\d+)\s*([kmgtp]?i?b?)\s*$", re.I)
_GPU_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._ -]*$")  # "rtx 4090" is an alias too


def _finite(x: float, form: str, value: object) -> float:
    if not math.isfinite(x):
        # A text the JSON Schema's pattern accepts can still overflow ("1" * 400 + "h").
        error = Unchecked if isinstance(value, str) else ValueError
        raise error(f"expected {form}, got {_shown(value)} (numbers must be finite)")
    return x


def _number(value: object, form: str) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except OverflowError:
        x = math.inf
    return _finite(x, form, value)


def parse_size_gb(value: object) -> float:
    """``"500GB+"`` -> 500.0 (GB). A bare number means GB."""
    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_FORM}")
    if isinstance(value, int | float):
        if _number(value, SIZE_FORM) < 0:
            raise ValueError(f"expected {SIZE_FORM}, not a negative number")
        return float(value)
    m = _SIZE_PARTS.match(str(value))
    if not m or not _SIZE_RE.match(str(value)) or m.group(2).upper() not in _SIZE_UNITS:
        raise ValueError(f"expected {SIZE_FORM}, got {_shown(value)}")
    return _finite(float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()], SIZE_FORM, value)


def parse_duration_s(value: object) -> float:
    """``"1h30m"`` -> 5400.0 seconds. Bare numbers are refused: "10" is ambiguous."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected {DURATION_FORM}, got {_shown(value)}")
    text = str(value)
    if not _DURATION_RE.match(text) or len(text) > 100:
        raise ValueError(f"expected {DURATION_FORM}, got {_shown(value)}")
    parts = _DURATION_PART.findall(text.lower())
    seconds = math.fsum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    _finite(seconds, DURATION_FORM, value)
    if seconds <= 0:
        raise Unchecked(f"expected a positive duration, {DURATION_FORM}")
    return seconds


def parse_min_count(value: object) -> float:
    """``16`` or ``"16+"`` -> 16.0 (a minimum)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {COUNT_FORM}")
    if isinstance(value, int | float):
        if _number(value, COUNT_FORM) <= 0:
            raise ValueError(f"expected {COUNT_FORM}, a positive number")
        return float(value)
    m = _COUNT_RE.match(str(value))
    if not m:
        raise ValueError(f"expected {COUNT_FORM}, got {_shown(value)}")
    if float(m.group(1)) <= 0:
        raise Unchecked(f"expected {COUNT_FORM}, a positive number, got {_shown(value)}")
    return _finite(float(m.group(1)), COUNT_FORM, value)


def parse_amount(value: object) -> float:
    """``2B``, ``500M``, ``1.5T``, ``8e9`` or a number (tokens, parameters, requests)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {AMOUNT_FORM}, got {value}")
    if isinstance(value, int | float):
        if _number(value, AMOUNT_FORM) < 0:
            raise ValueError(f"expected {AMOUNT_FORM}, not a negative number")
        return float(value)
    m = _AMOUNT_RE.match(str(value))
    if not m:
        raise ValueError(f"expected {AMOUNT_FORM}, got {_shown(value)}")
    x = float(m.group(1)) * _AMOUNT_SUFFIX[m.group(2).upper()]
    return _finite(x, AMOUNT_FORM, value)


def parse_bytes(value: object) -> float:
    """``200GB``, ``1.5TB``, ``110KB``, ``512MiB`` or a number of bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected {BYTES_FORM}, got {value}")
    if isinstance(value, int | float):
        if _number(value, BYTES_FORM) < 0:
            raise ValueError(f"expected {BYTES_FORM}, not a negative number")
        return float(value)
    m = _BYTES_RE.match(str(value))
    if not m or m.group(2).upper() not in _BYTE_UNITS:
        raise ValueError(f"expected {BYTES_FORM}, got {_shown(value)}")
    return _finite(float(m.group(1)) * _BYTE_UNITS[m.group(2).upper()], BYTES_FORM, value)


def parse_gpu(value: object) -> GpuRequest:
    """Parse the ``gpu:`` forms (also `--gpu` of every command): ``NAME[:COUNT[+]]``,
    ``SIZE+[:COUNT[+]]``, ``any[:COUNT[+]]``; ``none``/``0``/false/null mean CPU only."""
    if value is None or value is False or (value == 0 and not isinstance(value, bool)):
        return GpuRequest(cpu_only=True)
    if not isinstance(value, str):
        raise ValueError(f"expected {GPU_FORM}, got {_shown(value)}")
    text = value.strip()
    head, sep, tail = text.rpartition(":")
    if not sep:
        head, tail = text, ""
    at_least = sep and tail.strip().endswith("+")
    count = _gpu_count(tail.strip().removesuffix("+"), value) if sep else None
    head = head.strip()
    low = head.lower()
    if low in ("none", "cpu"):
        if sep:
            raise ValueError(f"expected {GPU_FORM}: 'none' takes no count")
        return GpuRequest(cpu_only=True)
    if low == "any":
        return GpuRequest(any_gpu=True, count=count, count_at_least=bool(at_least))
    if head.endswith("+"):
        try:
            mem = parse_size_gb(head)
        except ValueError:
            raise ValueError(f"expected {GPU_FORM}, got {_shown(value)}") from None
        if mem <= 0 or mem > 10_000:
            raise Unchecked(f"expected a GPU memory floor above 0 and up to 10000GB, got {mem:g}")
        return GpuRequest(min_memory_gb=mem, count=count, count_at_least=bool(at_least))
    if not _GPU_NAME_RE.match(head) or len(head) > 100:
        raise ValueError(f"expected {GPU_FORM}, got {_shown(value)}")
    return GpuRequest(name=head, count=count, count_at_least=bool(at_least))


def _gpu_count(text: str, value: object) -> int:
    if not text.isascii() or not text.isdigit() or text.startswith("0") or len(text) > 3:
        raise ValueError(
            f"expected {GPU_FORM}; the count after ':' must be 1 to {MAX_GPUS}, got {_shown(value)}"
        )
    return int(text)


def format_size_gb(gb: float) -> str:
    return f"{gb / 1000:g}TB" if gb >= 1000 else f"{gb:g}GB"
