"""The client's SSH key pair that created instances authorize (keys/cloudgpu_ed25519).

Generated once, 0600 in a 0700 directory under the data dir; only its path and public
half ever leave this module (never the private key's text).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEY_NAME = "cloudgpu_ed25519"


def ensure_keypair(keys_dir: Path) -> tuple[Path, str]:
    """(private key path, OpenSSH public key line), creating the pair on first use."""
    path = keys_dir / KEY_NAME
    pub = path.with_name(KEY_NAME + ".pub")
    if path.exists() and pub.exists():
        return path, pub.read_text().strip()
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
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
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private)
    os.replace(tmp, path)
    pub.write_text(public + "\n")
    return path, public
