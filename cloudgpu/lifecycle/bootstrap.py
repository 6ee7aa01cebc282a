"""Run templates/bootstrap.sh on an instance: local NVMe at /nvme, deadline armed.

The script is sent inline (``sh -c SCRIPT``), so it costs one round trip and needs no
file on the instance. Its environment says what it may do; see the script's header.
"""

from __future__ import annotations

import ipaddress
import shlex
from importlib import resources

from cloudgpu.errors import RemoteError
from cloudgpu.provider import Capabilities, Instance
from cloudgpu.remote import Machine

INSTANCE_ENV = "CLOUDGPU_INSTANCE"


def script() -> str:
    return resources.files("cloudgpu.templates").joinpath("bootstrap.sh").read_text()


LOOPBACK = ("localhost", "::1")


def may_dispose(instance: Instance, caps: Capabilities) -> bool:
    """May the bootstrap format disks and power the machine off? Only on a disposable
    provider's instance that is reached over the network: an address on this computer
    (a test double of a cloud, a tunnel) is never a VM made for the job, and formatting
    or powering off this computer must be impossible whatever a provider claims."""
    if not caps.disposable or instance.ssh is None:
        return False
    host = instance.ssh.host.strip("[]").lower()
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host not in LOOPBACK


def bootstrap(
    machine: Machine, instance: Instance, caps: Capabilities, deadline: float | None
) -> str:
    """Prepare NVMe and arm the deadline; return the script's summary line."""
    iid = instance.id
    env = {
        "CLOUDGPU_NVME": machine.nvme_path,
        INSTANCE_ENV: iid,
        "CLOUDGPU_DEADLINE": str(int(deadline)) if deadline else "",
        "CLOUDGPU_DISPOSABLE": "1" if may_dispose(instance, caps) else "0",
    }
    out: list[bytes] = []
    rc = machine.run(
        f"sh -c {shlex.quote(script())} cloudgpu-bootstrap",
        env=env,
        on_stdout=out.append,
        on_stderr=out.append,
        timeout=600,
    )
    text = b"".join(out).decode(errors="replace").strip()
    if rc != 0:
        last = text.splitlines()[-1] if text else f"exit status {rc}"
        raise RemoteError(f"bootstrap of instance {iid} failed: {last}")
    return text.splitlines()[-1] if text else ""
