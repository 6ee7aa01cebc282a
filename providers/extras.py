"""Whether a provider's cloud SDK (its pip extra) is installed, asked without importing it.

A provider whose SDK is missing is not enabled, whatever credentials exist: `check` says
"not enabled: install cloudgpu[gcp]", `launch` and `down --orphans` skip it with that
hint, instead of failing later with ModuleNotFoundError. importlib.util.find_spec only
locates the package (it imports at most its namespace parents), so availability() stays
cheap and offline.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from cloudgpu.provider import Availability


def missing_sdk(modules: Sequence[str], extra: str) -> Availability | None:
    """A disabled Availability naming ``extra`` when one of ``modules`` cannot be
    imported, else None."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or import halted
            found = False
        if not found:
            return Availability(
                False,
                f"not enabled: install cloudgpu[{extra}] ({name} is not installed)",
                extra=extra,
            )
    return None
