"""The client's SSH key pair that created instances authorize (keys/cloudgpu_ed25519).

Generated once, 0600 in a 0700 directory under the data dir; only its path and public
half ever leave this module (never the private key's text).
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEY_NAME = "cloudgpu_ed25519"


def ensure_keypair(keys_dir: Path) -> tuple[Path, str]:
    """(private key path, OpenSSH public key line), creating the pair on first use.

    Safe when several launches (threads of `runner serve`, or processes) ask at once: the
    pair is made under an exclusive lock on ``keys_dir/.lock``, so every caller gets the
    one pair that ends up on disk.
    """
    path = keys_dir / KEY_NAME
    pub = path.with_name(KEY_NAME + ".pub")
    if path.exists() and pub.exists():
        return path, pub.read_text().strip()
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
    lock_fd = os.open(keys_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if path.exists() and pub.exists():  # made while we waited for the lock
            return path, pub.read_text().strip()
        return path, _write_pair(path, pub)
    finally:
        os.close(lock_fd)


def _write_pair(path: Path, pub: Path) -> str:
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
        + " cloudgpu"
    )
    tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private)
    os.replace(tmp, path)
    pub.write_text(public + "\n")
    return public
