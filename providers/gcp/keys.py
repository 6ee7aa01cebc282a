"""A per-job SSH key pair for GCP instances, made when the caller brings none.

The private key is written 0600 under the data dir's keys/ folder and only its path ever
leaves this module; the public key goes into the instance metadata. Must not log or
return the private key.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def make_key_pair(keys_dir: Path, name: str, comment: str = "cloudgpu") -> tuple[Path, str]:
    """Create ``keys_dir/name`` (private, 0600) and ``name.pub``; return (path, public line).

    An existing pair of that name is reused, so a retried create authorizes the same key.
    """
    keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = keys_dir / name
    public = keys_dir / f"{name}.pub"
    if private.exists() and public.exists():
        return private, public.read_text().strip()
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    # Mode set at creation: the key is never readable by others, not even briefly.
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.chmod(private, 0o600)
    line = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    line = f"{line} {comment}"
    public.write_text(line + "\n")
    return private, line
