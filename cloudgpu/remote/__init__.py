"""The remote layer: reach an instance and run commands and move files there.

:func:`connect` turns a provider's Instance into a :class:`Machine`: an SSHMachine when
the instance has an SSH address (host key verified, see cloudgpu.remote.hostkeys), a
LocalMachine when it is a workspace on this computer. Callers depend on the Machine
protocol only. This package knows nothing of jobs, providers' APIs or the state store.
"""

from __future__ import annotations

from pathlib import Path

from cloudgpu.errors import RemoteError
from cloudgpu.provider import Instance
from cloudgpu.remote.hostkeys import NewHostKeyFn, fingerprint
from cloudgpu.remote.local import LocalMachine
from cloudgpu.remote.machine import (
    EXIT_STOPPED,
    EXIT_TIMEOUT,
    NVME_ENV,
    ConnectionLost,
    Machine,
    MissingSource,
    ProgressFn,
    TransferStats,
)
from cloudgpu.remote.openssh import OpenSSH
from cloudgpu.remote.ssh import SSHMachine
from cloudgpu.remote.transport import Endpoint, open_transport

__all__ = [
    "EXIT_STOPPED",
    "EXIT_TIMEOUT",
    "NVME_ENV",
    "ConnectionLost",
    "Endpoint",
    "LocalMachine",
    "Machine",
    "MissingSource",
    "ProgressFn",
    "SSHMachine",
    "TransferStats",
    "connect",
    "fingerprint",
]


def connect(
    instance: Instance,
    *,
    known_hosts: Path,
    key_file: Path | None = None,
    timeout: float = 60,
    on_new_host_key: NewHostKeyFn | None = None,
    use_openssh: bool = True,
) -> Machine:
    """A Machine for ``instance``; waits up to ``timeout`` s for its SSH to come up.

    ``key_file`` overrides the instance's own; ``use_openssh`` lets bulk transfers use
    the system ssh binary when installed (faster), after paramiko verified the host key.
    """
    if instance.ssh is None:
        if not instance.workdir:
            raise RemoteError(f"instance {instance.id} has neither an SSH address nor a workdir")
        return LocalMachine(Path(instance.workdir))
    target = instance.ssh
    key = key_file or (Path(target.key_file) if target.key_file else None)
    ep = Endpoint(target.host, target.port, target.user, key, tuple(target.host_key_fingerprints))
    transport = open_transport(ep, known_hosts, timeout=timeout, on_new_host_key=on_new_host_key)
    openssh = OpenSSH(ep, known_hosts) if use_openssh and OpenSSH.available() else None
    return SSHMachine(
        transport,
        ep,
        nvme_path=instance.nvme_mount or "/nvme",
        openssh=openssh,
        launcher=target.launcher,
    )
