"""The SSH key pair made for one Azure job when the request brings no public key.

The private key is written 0600 under the data dir's keys/ (created 0700) and only its
path ever leaves this module; the key text is never logged or put in state. Ed25519:
Azure accepts Ed25519 keys for Linux VMs and they are quick to make.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519


def key_path(keys_dir: Path, name: str) -> Path:
    return keys_dir / f"azure-{name}"


def _pub(path: Path) -> Path:
    return path.parent / (path.name + ".pub")


def ensure_key_pair(keys_dir: Path, name: str) -> tuple[Path, str]:
    """(private key path, OpenSSH public key line) for ``name``; reused when present, so a
    retried create authorizes the same key."""
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
    path = key_path(keys_dir, name)
    pub_path = _pub(path)
    if path.exists() and pub_path.exists():
        return path, pub_path.read_text(encoding="utf-8").strip()
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode("ascii")
    )
    # Create with 0600 from the start: the key must never be readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private)
    pub_line = f"{public} cloudgpu-{name}"
    pub_path.write_text(pub_line + "\n", encoding="utf-8")
    return path, pub_line


def remove_key_pair(keys_dir: Path, name: str) -> None:
    path = key_path(keys_dir, name)
    for p in (path, _pub(path)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
