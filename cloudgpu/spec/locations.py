"""Where a job's data comes from and goes: instance paths, sources and destinations.

The values of cloudgpu.spec.schema that name a place: instance paths (all under /nvme),
data sources (local, s3:// gs:// az:// https://, or a provider's own PROVIDER://) and
output destinations (local or an object store). Their JSON Schema states the forms; the
checks here add what a pattern cannot (a remote URI's bucket and account rules, by
cloudgpu.data.uri). Nothing here touches the file system: whether a local path exists
is the loader's question.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from cloudgpu.data import uri
from cloudgpu.spec.fields import MAX_TEXT, Unchecked, Value, shown

# Every instance path of a job (data.dst, outputs.src, checkpoint) lies under /nvme,
# which each provider maps to its scratch disk ($CLOUDGPU_NVME; a workspace dir on local).
NVME = "/nvme"
NVME_PATTERN = r"^/nvme(?:/(?!\.\.(?:/|$))[^/\x00-\x1f]*)*$"
NVME_FORM = "an absolute path under /nvme on the instance, like /nvme/data"
_NVME_RE = re.compile(NVME_PATTERN)


def _nvme_path(value: Any) -> str:
    if not isinstance(value, str) or not _NVME_RE.match(value):
        raise ValueError(f"expected {NVME_FORM}, got {shown(value)}")
    return posixpath.normpath(value)


def nvme_path(description: str) -> Value:
    return Value({"type": "string", "pattern": NVME_PATTERN}, _nvme_path, description)


# Remote data sources (s3:// gs:// az:// https://) are parsed by cloudgpu.data.uri; the
# JSON Schema states only their scheme (bucket and account rules are the loader's).
REMOTE_SOURCE_PATTERN = rf"^(?:{'|'.join(uri.SCHEMES)})://\S+$"
# PROVIDER://... : data a provider holds itself (kaggle://OWNER/DATASET). The scheme must
# name an installed provider and the job then runs only there: the loader's verdict
# checks both (spec/load.py), since only it knows the installed providers.
# Schemes that are transports or other stores' URLs, never a provider's name: refused
# here already, with the supported forms.
NOT_PROVIDERS = frozenset(
    {"http", "ftp", "ftps", "sftp", "ssh", "scp", "file", "rsync", "hdfs", "gcs", "s3a",
     "s3n", "wasb", "wasbs", "abfs", "abfss", "git", "webdav", "smb", "nfs"}
)  # fmt: skip
PROVIDER_SOURCE_PATTERN = rf"^(?!(?:{'|'.join(sorted(NOT_PROVIDERS))})://)[a-z][a-z0-9_-]*://\S+$"
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
LOCAL_SOURCE_PATTERN = r"^(?![A-Za-z][A-Za-z0-9+.-]*://)[^\x00-\x1f]*\S[^\x00-\x1f]*$"
SOURCE_FORMS = (
    "a local path, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://ACCOUNT/CONTAINER/PREFIX "
    "or https://HOST/PATH"
)


def _location(value: Any, forms: str) -> str:
    """``value`` as a location's text: a string, not blank, not too long."""
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value == "" or value is None else shown(value)
        raise ValueError(f"expected {forms}, got {got}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"expected at most {MAX_TEXT} characters, got {len(value):,}")
    return value


def _remote(value: str) -> str:
    """A remote URI the pattern let through, checked by its parser (bucket and account
    rules); a failure is beyond what the JSON Schema states."""
    try:
        uri.parse(value)
    except ValueError as exc:
        raise Unchecked(str(exc)) from None
    return value


def _source(value: Any) -> str:
    value = _location(value, SOURCE_FORMS)
    m = _SCHEME_RE.match(value)
    if m is None:
        if not re.match(LOCAL_SOURCE_PATTERN, value):
            raise ValueError("expected a local path without control characters")
        return value
    if not re.match(REMOTE_SOURCE_PATTERN, value):
        if re.match(PROVIDER_SOURCE_PATTERN, value):
            return value  # a provider's own data: the verdict checks the provider
        schemes = ", ".join(s + "://" for s in uri.SCHEMES)
        raise ValueError(f"{m.group(1)}:// sources are not supported; expected one of {schemes}")
    return _remote(value)


SOURCE = Value(
    {
        "anyOf": [
            {"type": "string", "pattern": LOCAL_SOURCE_PATTERN, "maxLength": MAX_TEXT},
            {"type": "string", "pattern": REMOTE_SOURCE_PATTERN, "maxLength": MAX_TEXT},
            {"type": "string", "pattern": PROVIDER_SOURCE_PATTERN, "maxLength": MAX_TEXT},
        ]
    },
    _source,
    "local path (relative to the job file), s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, "
    "az://ACCOUNT/CONTAINER/PREFIX or https://HOST/PATH",
)
LOCAL_DEST_PATTERN = r"^(?![A-Za-z][A-Za-z0-9+.-]*://)[^\x00]*\S[^\x00]*$"
# Outputs may go straight from the instance to an object store (cloudgpu.data.push).
OUTPUT_SCHEMES = ("s3", "gs", "az")
REMOTE_DEST_PATTERN = rf"^(?:{'|'.join(OUTPUT_SCHEMES)})://\S+$"
DEST_FORMS = "a local path, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://ACCOUNT/CONTAINER/PREFIX"


def _dest(value: Any) -> str:
    value = _location(value, DEST_FORMS)
    if "\x00" in value:
        raise ValueError("expected a path without NUL bytes")
    m = _SCHEME_RE.match(value)
    if m is None:
        return value
    if not re.match(REMOTE_DEST_PATTERN, value):
        schemes = ", ".join(s + "://" for s in OUTPUT_SCHEMES)
        raise ValueError(
            f"outputs cannot go to {m.group(1)}://; expected a local path or {schemes}"
        )
    return _remote(value)


def _store_dest(value: Any) -> str:
    if isinstance(value, str) and not _SCHEME_RE.match(value):
        schemes = ", ".join(s + "://" for s in OUTPUT_SCHEMES)
        raise ValueError(f"expected an object store location ({schemes}), got {shown(value)}")
    return _dest(value)


STORE_DEST = Value(
    {"type": "string", "pattern": REMOTE_DEST_PATTERN, "maxLength": MAX_TEXT},
    _store_dest,
    "s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://ACCOUNT/CONTAINER/PREFIX the instance "
    "syncs the checkpoint to and restores it from (default: this machine)",
)

OUTPUT_DEST = Value(
    {
        "anyOf": [
            {"type": "string", "pattern": LOCAL_DEST_PATTERN, "maxLength": MAX_TEXT},
            {"type": "string", "pattern": REMOTE_DEST_PATTERN, "maxLength": MAX_TEXT},
        ]
    },
    _dest,
    "local directory (relative to the current directory), or s3://BUCKET/PREFIX, "
    "gs://BUCKET/PREFIX, az://ACCOUNT/CONTAINER/PREFIX: uploaded by the instance itself",
)
