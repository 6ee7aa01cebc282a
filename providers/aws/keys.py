"""The SSH key a job's instance trusts: the caller's public key, or one made here.

When the caller brings no public key, an Ed25519 pair is generated and the private half
written 0600 into the data dir's keys/ (created 0700); only its path ever leaves this
module. A retried create for the same instance name finds and reuses the same file, so
the key pair imported into EC2 stays the same. Nothing here talks to AWS.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cloudgpu import sshkeys

KEY_PREFIX = "aws-"


@dataclass(frozen=True)
class JobKey:
    public_key: str  # OpenSSH one-line public key
    private_key_file: Path | None  # set only when generated here
    generated: bool  # made by this call (a retry reusing the file says False)


def key_path(keys_dir: Path, name: str) -> Path:
    return keys_dir / f"{KEY_PREFIX}{name}"


def job_key(keys_dir: Path, name: str, public_key: str) -> JobKey:
    """The caller's key when given, else this instance name's generated key."""
    if public_key.strip():
        return JobKey(public_key.strip(), None, False)
    path = key_path(keys_dir, name)
    existed = path.exists()
    path, public = sshkeys.key_pair(keys_dir, path.name, f"cloudgpu-{name}")
    return JobKey(public, path, not existed)


def remove_key_files(keys_dir: Path, name: str) -> None:
    """Delete a generated key pair's files (no error when already gone)."""
    sshkeys.remove_key_pair(keys_dir, key_path(keys_dir, name).name)
