"""Running the object scripts (puller, pusher) on the instance and reading what they say.

A manifest (signed URLs: secrets until they expire) is written 0600 here, copied to
the instance's NVMe state directory and deleted by the script once read. The scripts'
stdout is JSON lines, read as hostile input: bounded, and anything that is not a JSON
object is dropped. Their exit statuses (cloudgpu.remote.objwire) become the project's
errors here, with the store's own words and no URL.
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
import shlex
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cloudgpu.errors import AuthError, CloudGPUError, ConfigError, NotFoundError, RemoteError
from cloudgpu.remote import Machine, ProgressFn
from cloudgpu.remote import objwire as wire

CA_FILE_ENV = "CLOUDGPU_CA_FILE"  # PEM certificates the instance trusts besides its own
MAX_CA_BYTES = 1 << 20
STATE_DIR = ".cloudgpu/pull"  # under the instance's NVMe: indexes, partials, manifests
MAX_LINE = 1 << 16
MAX_STDERR = 1 << 16

Event = dict[str, Any]


def trusted_ca(env: Mapping[str, str]) -> str | None:
    """The PEM text of ``$CLOUDGPU_CA_FILE`` (a private endpoint's CA, e.g. MinIO or a
    test server), which the instance's scripts then trust besides the system's; None
    when unset. A file that is not PEM certificates is a clear error."""
    path = env.get(CA_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CA_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{CA_FILE_ENV}={path}: cannot read: {exc.strerror}") from None
    text = raw.decode("ascii", errors="replace")
    if len(raw) > MAX_CA_BYTES or "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{CA_FILE_ENV}={path}: expected PEM certificates (under 1 MiB)")
    return text


def state_dir(machine: Machine) -> str:
    return f"{machine.nvme_path.rstrip('/')}/{STATE_DIR}"


def command(python: str, program: str, args: list[str]) -> str:
    """The shell command running ``program`` on the instance (system python3 preferred,
    as for the sync agent: version-manager shims cost a start-up each)."""
    tail = " ".join(shlex.quote(a) for a in ["-c", program, *args])
    if python != "python3":
        return f"{python} {tail}"
    return f'P=python3; [ -x /usr/bin/python3 ] && P=/usr/bin/python3; exec "$P" {tail}'


class Lines:
    """Splits a script's stdout into JSON events (bounded: hostile bytes are dropped)."""

    def __init__(self, on_event: Callable[[Event], None]) -> None:
        self.buf = b""
        self.on_event = on_event
        self.last: Event = {}

    def feed(self, data: bytes) -> None:
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                self.last = ev
                self.on_event(ev)
        if len(self.buf) > MAX_LINE:
            self.buf = b""


def put_manifest(machine: Machine, man: Mapping[str, Any], remote_dir: str) -> str:
    """Copy ``man`` to the instance; the path it has there."""
    name = f"manifest-{secrets.token_hex(8)}.json.gz"
    with tempfile.TemporaryDirectory(prefix="cloudgpu-objects-") as tmp:
        local = Path(tmp, name)
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(json.dumps(man).encode(), compresslevel=3))
        machine.put_file(local, f"{remote_dir}/{name}")
    return f"{remote_dir}/{name}"


def progress_events(progress: ProgressFn | None) -> Callable[[Event], None]:
    """Feeds a script's progress lines to ``progress``: running ones while bytes are
    left, then the final ``done`` once (a bar ends when it reaches its total)."""

    def event(ev: Event) -> None:
        if progress is None:
            return
        done, total = int(ev.get("done", 0)), int(ev.get("total", 0))
        if ev.get("ev") == "done" or (ev.get("ev") == "progress" and done < total):
            progress(done, total)

    return event


def run(
    machine: Machine, program: str, args: list[str], on_event: Callable[[Event], None]
) -> tuple[int, Event, str]:
    """Run ``program`` with ``args`` there; (exit status, last event, stderr)."""
    lines = Lines(on_event)
    err: list[bytes] = []
    rc = machine.run(
        command(getattr(machine, "python", "python3"), program, args),
        on_stdout=lines.feed,
        on_stderr=lambda b: err.append(b) if sum(map(len, err)) < MAX_STDERR else None,
    )
    return rc, lines.last, b"".join(err).decode(errors="replace")


def failure(
    where: str, provider: str, rc: int, last: Mapping[str, Any], err: str, ttl: int
) -> CloudGPUError:
    """The error for a script that ended with ``rc``: what it said, and what to do."""
    msg = str(last.get("message") or (err.strip().splitlines() or [f"exit status {rc}"])[-1])
    if rc == wire.EXIT_EXPIRED:
        return AuthError(
            f"{where}: {msg}",
            provider=provider,
            hint=f"the URLs were signed for {ttl} s; check the instance's clock, then try "
            "again (the transfer resumes where it stopped)",
        )
    if rc == wire.EXIT_AUTH:
        return AuthError(
            f"{where}: {msg}",
            provider=provider,
            hint="the signing credentials must be allowed these operations on the objects",
        )
    if rc == wire.EXIT_NOTFOUND:
        return NotFoundError(f"{where}: {msg}", provider=provider)
    if rc == 127:
        return RemoteError(f"{where}: python3 is missing on the instance")
    hint = "try again: the transfer resumes where it stopped" if rc != wire.EXIT_USAGE else None
    return RemoteError(f"{where}: {msg}", hint=hint)
