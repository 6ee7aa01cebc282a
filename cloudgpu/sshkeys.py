"""SSH key pairs cloudgpu makes: the client's own pair and per-instance pairs.

Ed25519, private half written 0600 (created so, never readable by others even briefly)
in a 0700 keys directory; only paths and public lines leave this module, never the
private key's text. Making a pair takes an exclusive lock on ``keys_dir/.lock``, so
concurrent callers (threads of `runner serve`, parallel launches) all get the one pair
that ends up on disk, and a retried create finds and reuses the same pair.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CLIENT_KEY = "cloudgpu_ed25519"


def key_file(keys_dir: Path, name: str) -> Path:
    return keys_dir / name


def _pub(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def key_pair(keys_dir: Path, name: str, comment: str = "cloudgpu") -> tuple[Path, str]:
    """(private key path, OpenSSH public key line) of ``keys_dir/name``, made on first use."""
    path = key_file(keys_dir, name)
    pub = _pub(path)
    if path.exists() and pub.exists():
        return path, pub.read_text().strip()
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
    lock_fd = os.open(keys_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if path.exists() and pub.exists():  # made while we waited for the lock
            return path, pub.read_text().strip()
        return path, _write_pair(path, pub, comment)
    finally:
        os.close(lock_fd)


def ensure_keypair(keys_dir: Path) -> tuple[Path, str]:
    """The client's own pair (keys/cloudgpu_ed25519), which instances authorize."""
    return key_pair(keys_dir, CLIENT_KEY)


def remove_key_pair(keys_dir: Path, name: str) -> None:
    """Delete a pair's files; no error when already gone."""
    path = key_file(keys_dir, name)
    for p in (path, _pub(path)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _write_pair(path: Path, pub: Path, comment: str) -> str:
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
    )
    line = f"{public} {comment}"
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}-{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private)
    os.replace(tmp, path)
    pub.write_text(line + "\n")
    return line
