"""cloudgpu's tags carried inside a resource's name, for APIs with no labels (Lambda
instances, Kaggle kernels): the pieces every such encoding shares.

A name holds a few tag values in a fixed order; values too long for it are replaced by
a base-36 digest, which can still be matched but not read back. ``encode_field`` (each
provider's own) says how a tag is held, or None for a tag the name cannot hold:
filtering on such a tag matches nothing, never everything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def digest(value: str, length: int) -> str:
    """``length`` base-36 characters of the value's SHA-256."""
    n = int.from_bytes(hashlib.sha256(value.encode()).digest()[:8], "big")
    out = ""
    for _ in range(length):
        n, r = divmod(n, 36)
        out += DIGITS[r]
    return out


def fields_match(
    encoded: Mapping[str, str] | None,
    wanted: Mapping[str, str],
    encode_field: Callable[[str, str], str | None],
) -> bool:
    """Whether a name's decoded fields hold every wanted tag value."""
    if encoded is None:
        return False
    for key, value in wanted.items():
        want = encode_field(key, value)
        if want is None or encoded.get(key) != want:
            return False
    return True
