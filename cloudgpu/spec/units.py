"""Parsers for the small value languages of job.yaml: sizes, durations, GPU requests.

Each parser takes the user's value and returns a plain number or GpuRequest, or raises
ValueError whose text names the expected form; cloudgpu.spec.load adds file, line and key.
Nothing here reads files or knows the YAML layout.
"""

from __future__ import annotations

import re

from cloudgpu.spec.model import GpuRequest

SIZE_FORM = 'a size like "500GB", "1.5TB" or "64GiB" (a trailing "+" means "at least")'
DURATION_FORM = 'a duration like "6h", "90m", "30s", "1d" or "1h30m"'
GPU_FORM = (
    'a GPU like "A100-80GB:8", "H100", "H100:2", "24GB+", "24GB+:4", "any", "any:2" or "none"'
)
COUNT_FORM = 'a number like 16 or "16+" (at least 16)'

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
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*(\+?)\s*$")
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)")
_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_COUNT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(\+?)\s*$")
_GPU_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$")


def parse_size_gb(value: object) -> float:
    """``"500GB+"`` -> 500.0 (GB). A bare number means GB."""
    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_FORM}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected {SIZE_FORM}, not a negative number")
        return float(value)
    m = _SIZE_RE.match(str(value))
    if not m or m.group(2).upper() not in _SIZE_UNITS:
        raise ValueError(f"expected {SIZE_FORM}, got {value!r}")
    return float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]


def parse_duration_s(value: object) -> float:
    """``"1h30m"`` -> 5400.0 seconds. Bare numbers are refused: "10" is ambiguous."""
    text = str(value).strip().lower().replace(" ", "")
    if isinstance(value, bool) or not text:
        raise ValueError(f"expected {DURATION_FORM}")
    parts = _DURATION_RE.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"expected {DURATION_FORM}, got {value!r}")
    seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"expected a positive duration, {DURATION_FORM}")
    return seconds


def parse_min_count(value: object) -> float:
    """``16`` or ``"16+"`` -> 16.0 (a minimum)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {COUNT_FORM}")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"expected {COUNT_FORM}, a positive number")
        return float(value)
    m = _COUNT_RE.match(str(value))
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"expected {COUNT_FORM}, got {value!r}")
    return float(m.group(1))


def parse_gpu(value: object) -> GpuRequest:
    """Parse the ``gpu:`` forms. ``none``/``0``/null mean a CPU-only job."""
    if value is None or value is False or value == 0:
        return GpuRequest(cpu_only=True)
    if isinstance(value, bool | int | float):
        raise ValueError(f"expected {GPU_FORM}, got {value!r}")
    text = str(value).strip()
    head, sep, tail = text.rpartition(":")
    if not sep:
        head, tail = text, ""
    count = _gpu_count(tail, value) if sep else None
    low = head.lower()
    if low in ("none", "cpu"):
        if count:
            raise ValueError(f"expected {GPU_FORM}: 'none' takes no count")
        return GpuRequest(cpu_only=True)
    if low == "any":
        return GpuRequest(any_gpu=True, count=count)
    if head.endswith("+"):
        try:
            mem = parse_size_gb(head)
        except ValueError:
            raise ValueError(f"expected {GPU_FORM}, got {value!r}") from None
        return GpuRequest(min_memory_gb=mem, count=count)
    if not _GPU_NAME_RE.match(head):
        raise ValueError(f"expected {GPU_FORM}, got {value!r}")
    return GpuRequest(name=head, count=count)


def _gpu_count(text: str, value: object) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"expected {GPU_FORM}; the count after ':' must be >= 1, got {value!r}")
    return int(text)


def format_size_gb(gb: float) -> str:
    return f"{gb / 1000:g}TB" if gb >= 1000 else f"{gb:g}GB"
