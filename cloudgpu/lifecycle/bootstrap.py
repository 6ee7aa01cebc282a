"""Run templates/bootstrap.sh on an instance: local NVMe at /nvme, deadline armed.

The script is sent inline (``sh -c SCRIPT``), so it costs one round trip and needs no
file on the instance. Its environment says what it may do; see the script's header.
"""

from __future__ import annotations

import shlex
from importlib import resources

from cloudgpu.errors import RemoteError
from cloudgpu.provider import Capabilities
from cloudgpu.remote import Machine

INSTANCE_ENV = "CLOUDGPU_INSTANCE"


def script() -> str:
    return resources.files("cloudgpu.templates").joinpath("bootstrap.sh").read_text()


def bootstrap(
    machine: Machine, instance_id: str, caps: Capabilities, deadline: float | None
) -> str:
    """Prepare NVMe and arm the deadline; return the script's summary line."""
    env = {
        "CLOUDGPU_NVME": machine.nvme_path,
        INSTANCE_ENV: instance_id,
        "CLOUDGPU_DEADLINE": str(int(deadline)) if deadline else "",
        "CLOUDGPU_DISPOSABLE": "1" if caps.disposable else "0",
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
        raise RemoteError(f"bootstrap of instance {instance_id} failed: {last}")
    return text.splitlines()[-1] if text else ""
