"""Run templates/bootstrap.sh on an instance: local NVMe at /nvme, deadline armed, and
the provider's preemption-notice watcher started (cloudgpu/lifecycle/notice.py reads it).

The script is sent inline (``sh -c SCRIPT``), so it costs one round trip and needs no
file on the instance. Its environment says what it may do; see the script's header.
"""

from __future__ import annotations

import ipaddress
import shlex
from importlib import resources

from cloudgpu.errors import RemoteError
from cloudgpu.provider import Capabilities, Instance, NoticeWatcher
from cloudgpu.remote import Machine

INSTANCE_ENV = "CLOUDGPU_INSTANCE"
STATE_DIR = ".cloudgpu"  # under the instance's NVMe path: watchdog, watcher, notices


def state_dir(machine: Machine) -> str:
    return f"{machine.nvme_path.rstrip('/')}/{STATE_DIR}"


def watcher_text(watcher: NoticeWatcher) -> str:
    """The watcher script with its settings exported first (names checked, values
    quoted: they come from the provider's config)."""
    lines = ["#!/bin/sh"]
    for key, value in sorted(watcher.env.items()):
        if not key.isidentifier() or not key.isascii():
            raise RemoteError(f"notice watcher: {key!r} is not an environment variable name")
        lines.append(f"export {key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n" + watcher.script


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
    machine: Machine,
    instance: Instance,
    caps: Capabilities,
    deadline: float | None,
    watcher: NoticeWatcher | None = None,
) -> str:
    """Prepare NVMe, arm the deadline, start ``watcher``; return the summary line."""
    iid = instance.id
    env = {
        "CLOUDGPU_NVME": machine.nvme_path,
        INSTANCE_ENV: iid,
        "CLOUDGPU_DEADLINE": str(int(deadline)) if deadline else "",
        "CLOUDGPU_DISPOSABLE": "1" if may_dispose(instance, caps) else "0",
        "CLOUDGPU_WATCHER": watcher_text(watcher) if watcher is not None else "",
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
