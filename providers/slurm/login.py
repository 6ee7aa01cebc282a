"""The login node: one SSH connection (host key pinned) that Slurm's commands run over,
and the mapping of their failures into cloudgpu.errors.

Slurm's commands exit 1 for every failure and say why on stderr; the messages matched
here are Slurm's own error strings (slurm_strerror in src/common/slurm_errno.c, as
printed by sbatch/squeue), so the lifecycle can fail over on the ones that mean "not
here, not now". Anything else is a plain ProviderError carrying Slurm's last line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    ProviderError,
    QuotaError,
    RemoteError,
    TransientError,
)
from cloudgpu.provider import Instance, InstanceState, SSHTarget
from cloudgpu.remote import Machine, connect

NAME = "slurm"
CONNECT_TIMEOUT_S = 20.0
COMMAND_TIMEOUT_S = 120.0
MAX_OUTPUT = 8 << 20  # a login node's answer is small; a runaway one is cut off

_CAPACITY = (
    "Requested node configuration is not available",
    "Requested partition configuration not available now",
    "Node count specification invalid",
    "Invalid partition name specified",
    "Invalid generic resource (gres) specification",
    "Requested time limit is invalid",
    "More processors requested than permitted",
    "Memory required by task is not available",
    "Partition is unavailable",
)
_QUOTA = (
    "Job violates accounting/QOS policy",
    "QOSMaxSubmitJobPerUserLimit",
    "AssocMaxSubmitJobLimit",
    "Maximum job array size exceeded",
)
_AUTH = ("Invalid account or account/partition combination", "Access/permission denied")
_TRANSIENT = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Slurm temporarily unable to accept job",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
)

PinnedFn = Callable[[str, str], None]


def slurm_error(command: str, rc: int, stderr: str) -> ProviderError:
    """The error for a failed Slurm command, by Slurm's own message."""
    text = stderr.strip()
    last = text.splitlines()[-1] if text else f"exit status {rc}"
    what = command.split()[0] if command.split() else "command"
    if rc == 127:
        return ProviderError(
            f"{what}: not found on the login node", provider=NAME, hint="is Slurm's client there?"
        )
    for needles, cls in (
        (_CAPACITY, CapacityError),
        (_QUOTA, QuotaError),
        (_AUTH, AuthError),
        (_TRANSIENT, TransientError),
    ):
        if any(n in text for n in needles):
            return cls(f"{what}: {last}", provider=NAME)
    return ProviderError(f"{what}: {last}", provider=NAME)


class LoginNode:
    """Runs commands on the login node; connects on first use and again after a drop."""

    def __init__(
        self,
        target: SSHTarget,
        known_hosts: Path,
        on_new_host_key: PinnedFn | None = None,
    ) -> None:
        self.target = target
        self.known_hosts = known_hosts
        self.on_new_host_key = on_new_host_key
        self._machine: Machine | None = None
        self._lock = threading.Lock()

    def _connected(self) -> Machine:
        with self._lock:
            if self._machine is None:
                inst = Instance("slurm-login", NAME, InstanceState.RUNNING, ssh=self.target)
                self._machine = connect(
                    inst,
                    known_hosts=self.known_hosts,
                    timeout=CONNECT_TIMEOUT_S,
                    on_new_host_key=self.on_new_host_key,
                    use_openssh=False,
                )
            return self._machine

    def _drop(self) -> None:
        with self._lock:
            if self._machine is not None:
                self._machine.close()
                self._machine = None

    def run(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
        """(exit status, stdout, stderr); a lost connection is retried once."""
        try:
            return self._run_once(command, timeout)
        except RemoteError:
            self._drop()
        return self._run_once(command, timeout)

    def _run_once(self, command: str, timeout: float) -> tuple[int, str, str]:
        out: list[bytes] = []
        err: list[bytes] = []
        rc = self._connected().run(
            command,
            on_stdout=lambda b: _bounded(out, b),
            on_stderr=lambda b: _bounded(err, b),
            timeout=timeout,
        )
        return rc, _text(out), _text(err)

    def check(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """stdout of a command that must succeed; its failure mapped by slurm_error."""
        rc, out, err = self.run(command, timeout)  # SSH failures stay RemoteErrors
        if rc != 0:
            raise slurm_error(command, rc, err)
        return out

    def close(self) -> None:
        self._drop()


def _bounded(parts: list[bytes], data: bytes) -> None:
    if len(parts) * 65536 < MAX_OUTPUT:  # reads come in blocks of at most 64 KiB
        parts.append(data)


def _text(parts: list[bytes]) -> str:
    return b"".join(parts).decode(errors="replace")
