"""cloudgpu's tags, carried in a Lambda instance's name.

Lambda's launch API takes a free-text ``name`` of at most 64 characters and shows it back
in every instance listing; we do not rely on any other field to find our instances
again. 64 characters cannot hold the tags themselves (an owner is ``user@host``, a token
32 hex digits), so the name holds a compact, fixed-order encoding::

    cg.<job>.<instance>.<owner>

* ``job`` (TAG_JOB) is kept as written: the orphan sweep must read it back to ask the
  state store whether the job is still live. Job ids are at most 47 characters
  (``name[:40]-xxxxxx``), which is exactly what fits; a longer one is replaced by ``~`` +
  a digest (still matchable, not readable, so the sweep treats it as nobody's).
* ``instance`` (TAG_INSTANCE, else the idempotency token) is a 5-character base-36 digest
  and ``owner`` (TAG_OWNER) a 7-character one: they are only ever matched, never read.
* TAG_EXPIRES is not carried (the state store keeps it); filtering on it, or on any key
  other than those three, matches nothing, never everything.

Names not starting with ``cg.`` are someone else's instances and are never listed.
"""

from __future__ import annotations

from collections.abc import Mapping

from cloudgpu_providers.tagnames import digest, fields_match

from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, TAG_OWNER

PREFIX = "cg."
MAX_NAME = 64
_INSTANCE_LEN = 5
_OWNER_LEN = 7
MAX_JOB = MAX_NAME - len(PREFIX) - _INSTANCE_LEN - _OWNER_LEN - 2  # = 47
# What describe() reports in place of values a name holds only as digests.
INSTANCE_DIGEST = "cloudgpu-instance-digest"
OWNER_DIGEST = "cloudgpu-owner-digest"


_digest = digest


def encode_field(key: str, value: str) -> str | None:
    """``value`` as the name holds it for tag ``key``; None for keys a name can't hold."""
    if not value:
        return ""
    if key == TAG_JOB:
        return value if len(value) <= MAX_JOB else "~" + _digest(value, 8)
    if key == TAG_INSTANCE:
        return _digest(value, _INSTANCE_LEN)
    if key == TAG_OWNER:
        return _digest(value, _OWNER_LEN)
    return None


def encode(tags: Mapping[str, str], idempotency_key: str) -> str:
    """The instance name for ``tags`` (``idempotency_key`` stands in for TAG_INSTANCE)."""
    job = encode_field(TAG_JOB, tags.get(TAG_JOB, "")) or ""
    inst = encode_field(TAG_INSTANCE, tags.get(TAG_INSTANCE) or idempotency_key) or ""
    owner = encode_field(TAG_OWNER, tags.get(TAG_OWNER, "")) or ""
    return f"{PREFIX}{job}.{inst}.{owner}"


def fields(name: str | None) -> dict[str, str] | None:
    """The encoded fields of a cloudgpu name, or None for anyone else's instance."""
    if not name or not name.startswith(PREFIX):
        return None
    parts = name[len(PREFIX) :].rsplit(".", 2)  # a job id may itself hold dots
    if len(parts) != 3:
        return None
    return {TAG_JOB: parts[0], TAG_INSTANCE: parts[1], TAG_OWNER: parts[2]}


def matches(name: str | None, wanted: Mapping[str, str]) -> bool:
    return fields_match(fields(name), wanted, encode_field)


def readable_tags(name: str | None) -> dict[str, str]:
    """What a name gives back: the job as written; instance and owner as digests."""
    enc = fields(name)
    if enc is None:
        return {}
    out: dict[str, str] = {}
    if enc[TAG_JOB] and not enc[TAG_JOB].startswith("~"):
        out[TAG_JOB] = enc[TAG_JOB]
    if enc[TAG_INSTANCE]:
        out[INSTANCE_DIGEST] = enc[TAG_INSTANCE]
    if enc[TAG_OWNER]:
        out[OWNER_DIGEST] = enc[TAG_OWNER]
    return out
