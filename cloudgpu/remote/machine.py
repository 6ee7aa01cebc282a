"""The Machine interface: a place where a job's commands run and its files live.

Two implementations exist: :class:`cloudgpu.remote.ssh.SSHMachine` (an instance reached
over SSH) and :class:`cloudgpu.remote.local.LocalMachine` (this machine, for providers
without ``remote`` capability). The lifecycle talks only to this protocol, so it never
needs to know which one it holds. This module defines types only; it opens nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from cloudgpu.errors import RemoteError

# (bytes done, bytes total): called as a transfer advances; total is known up front.
ProgressFn = Callable[[int, int], None]
OutputFn = Callable[[bytes], None]
# (path relative to the tree's root, is a directory) -> leave it out of a put_dir.
ExcludeFn = Callable[[str, bool], bool]

# Exit statuses Machine.run returns when it ended the command itself, as a shell would
# report a command killed by SIGTERM, and as timeout(1) reports a timeout.
EXIT_STOPPED = 143
EXIT_TIMEOUT = 124

# Environment variable every machine exports to the job's commands: where local NVMe is.
NVME_ENV = "CLOUDGPU_NVME"


class ConnectionLost(RemoteError):
    """The connection to the machine broke (reset, closed, timed out): the machine itself
    may be fine, so a new connection may carry on."""


class MissingSource(RemoteError):
    """What get_dir/get_file was to fetch does not exist there: the connection is fine,
    retrying will not help (e.g. a job that wrote no outputs)."""


def byte_paths(exclude: ExcludeFn | None) -> Callable[[bytes, bool], bool] | None:
    """``exclude`` for the sync agent's walk, which names paths in bytes."""
    if exclude is None:
        return None
    return lambda path, is_dir: exclude(os.fsdecode(path), is_dir)


@dataclass
class TransferStats:
    """What a put/get did: files and bytes sent, files skipped as unchanged."""

    files_sent: int = 0
    bytes_sent: int = 0
    files_skipped: int = 0
    bytes_skipped: int = 0
    seconds: float = 0.0

    @property
    def files_total(self) -> int:
        return self.files_sent + self.files_skipped

    def add(self, other: TransferStats) -> TransferStats:
        return TransferStats(
            self.files_sent + other.files_sent,
            self.bytes_sent + other.bytes_sent,
            self.files_skipped + other.files_skipped,
            self.bytes_skipped + other.bytes_skipped,
            self.seconds + other.seconds,
        )


@runtime_checkable
class Machine(Protocol):
    """A place where a job runs: an instance over SSH, or this machine.

    Remote paths are POSIX paths as the job sees them (``/nvme/data``); a relative path
    is relative to the login directory (or the workspace, on this machine).
    """

    nvme_path: str  # where the job's local NVMe is ("/nvme" on real and sim machines)
    # Optional attribute ``detachable`` (default False): the machine runs python3 and
    # setsid, so a job may run detached and be followed again over a new connection.

    def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_stdout: OutputFn | None = None,
        on_stderr: OutputFn | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> int:
        """Run ``command`` with ``sh``; stream its output; return its exit status.

        Setting ``stop`` kills the command's whole process group (TERM, then KILL after a
        grace period) and returns EXIT_STOPPED; passing ``timeout`` does the same after
        that many seconds and returns EXIT_TIMEOUT. Output not consumed by a callback is
        discarded.
        """
        ...

    def put_dir(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressFn | None = None,
        exclude: ExcludeFn | None = None,
        streams: int = 1,
    ) -> TransferStats:
        """Copy the tree ``local`` to ``remote`` (created); files whose size and mtime
        match are skipped, and what ``exclude`` names is never sent (nor walked); raises
        RemoteError if the received data fails its check. ``streams`` > 1 sends the tree
        as that many shards unpacked in parallel there (where the machine can)."""
        ...

    def get_dir(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        """Copy the tree ``remote`` to ``local``, incrementally, like put_dir."""
        ...

    def put_file(
        self, local: Path, remote: str, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        """Copy one file to the path ``remote`` (its directory is created)."""
        ...

    def get_file(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        """Copy one remote file to the path ``local``."""
        ...

    def close(self) -> None:
        """Release the connection; the machine itself keeps running."""
        ...
