"""The SSH key a job's instance trusts: the caller's public key, or one made here.

When the caller brings no public key, an Ed25519 pair is generated and the private half
written 0600 into the data dir's keys/ (created 0700); only its path ever leaves this
module. A retried create for the same instance name finds and reuses the same file, so
the key pair imported into EC2 stays the same. Nothing here talks to AWS.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEY_PREFIX = "aws-"


@dataclass(frozen=True)
class JobKey:
    public_key: str  # OpenSSH one-line public key
    private_key_file: Path | None  # set only when generated here
    generated: bool  # made by this call (a retry reusing the file says False)


def key_path(keys_dir: Path, name: str) -> Path:
    return keys_dir / f"{KEY_PREFIX}{name}"


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_suffix(".tmp")
    # Created 0600 from the start: the key is never readable by others, not even briefly.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def job_key(keys_dir: Path, name: str, public_key: str) -> JobKey:
    """The caller's key when given, else this instance name's generated key."""
    if public_key.strip():
        return JobKey(public_key.strip(), None, False)
    path = key_path(keys_dir, name)
    pub_path = path.with_name(path.name + ".pub")
    if path.exists() and pub_path.exists():
        return JobKey(pub_path.read_text().strip(), path, False)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        + f" cloudgpu-{name}"
    )
    _write_private(path, private)
    pub_path.write_text(public + "\n")
    return JobKey(public, path, True)


def remove_key_files(keys_dir: Path, name: str) -> None:
    """Delete a generated key pair's files (no error when already gone)."""
    path = key_path(keys_dir, name)
    for p in (path, path.with_name(path.name + ".pub")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
