"""Host key verification: pinned fingerprints, a known_hosts file we own, never silence.

Rules (checked in :func:`verify_host_key`):

* The provider reported fingerprints out of band (cloud console output, API): the key
  presented must be one of them, else HostKeyError. The verified key then replaces any
  older entry for that address, because clouds reuse addresses for new instances.
* No fingerprints given: the known_hosts entry decides. A host seen for the first time is
  pinned (trust on first use) and ``on_new_host_key(host, fingerprint)`` is called so the
  user sees what was accepted; a key that differs from the pinned one is refused.

The file is in OpenSSH's format, so the system ``ssh`` can check against the same pins.
This module never connects anywhere.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import paramiko

from cloudgpu.errors import HostKeyError

NewHostKeyFn = Callable[[str, str], None]


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint form: ``SHA256:<base64, unpadded>``."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def host_label(host: str, port: int) -> str:
    """The known_hosts name of an address, as OpenSSH writes it."""
    return host if port == 22 else f"[{host}]:{port}"


def verify_host_key(
    host: str,
    port: int,
    key: paramiko.PKey,
    known_hosts: Path,
    pinned: Sequence[str] = (),
    on_new_host_key: NewHostKeyFn | None = None,
) -> None:
    """Accept ``key`` for host:port or raise HostKeyError (see the module docstring)."""
    label = host_label(host, port)
    fp = fingerprint(key)
    if pinned:
        if fp not in pinned:
            raise HostKeyError(
                f"host key of {label} is {fp}, not the one the provider reported "
                f"({', '.join(pinned)}); refusing to connect",
                hint="the address may have been taken over; do not trust this host",
            )
        _store(known_hosts, label, key, replace=True)
        return
    with _locked(known_hosts):
        keys = _load(known_hosts)
        have = keys.lookup(label)
        if have:
            if any(k.asbytes() == key.asbytes() for k in have.values()):
                return
            old = ", ".join(fingerprint(k) for k in have.values())
            raise HostKeyError(
                f"host key of {label} CHANGED: it presented {fp}, pinned is {old}; refusing "
                "to connect (this can be an attack, or the machine was reinstalled)",
                hint=f"if you trust the new key, remove {label} from {known_hosts}",
            )
        keys.add(label, key.get_name(), key)
        _save(keys, known_hosts)
    if on_new_host_key:
        on_new_host_key(label, fp)


def _store(known_hosts: Path, label: str, key: paramiko.PKey, *, replace: bool) -> None:
    with _locked(known_hosts):
        keys = _load(known_hosts)
        have = keys.lookup(label)
        if have and any(k.asbytes() == key.asbytes() for k in have.values()):
            return
        while replace and label in keys:  # every key type recorded for the address
            del keys[label]
        keys.add(label, key.get_name(), key)
        _save(keys, known_hosts)


def _load(path: Path) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    if path.exists():
        keys.load(str(path))
    return keys


def _save(keys: paramiko.HostKeys, path: Path) -> None:
    # Write-then-rename, so a concurrent reader (or `ssh`) never sees half a file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    keys.save(str(tmp))
    os.replace(tmp, path)


class _locked:
    """An exclusive lock beside the known_hosts file, for concurrent clients."""

    def __init__(self, path: Path) -> None:
        self.path = path.with_name(path.name + ".lock")

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
