"""The instance-side preemption watchers (templates/watchers/<cloud>.sh) as the
NoticeWatcher a provider hands the bootstrap (cloudgpu/lifecycle/bootstrap.py).

A watcher talks to the cloud's metadata service (169.254.169.254,
metadata.google.internal). An instance reached at an address of this computer is no VM
of that cloud (a test double, a tunnel), so it gets a watcher only when the config names
the metadata endpoint to use: nothing on this machine ever asks the real one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from importlib import resources

from cloudgpu.errors import ConfigError
from cloudgpu.provider import Instance, NoticeWatcher


def on_this_machine(instance: Instance) -> bool:
    host = (instance.ssh.host if instance.ssh else "").strip("[]").lower()
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def watcher(
    name: str, instance: Instance, endpoint: str, env: Mapping[str, str]
) -> NoticeWatcher | None:
    """templates/watchers/``name``.sh with its settings (only those that are set), or
    None for an instance on this machine without a configured ``endpoint``."""
    if not endpoint and on_this_machine(instance):
        return None
    text = resources.files("cloudgpu.templates").joinpath(f"watchers/{name}.sh").read_text()
    return NoticeWatcher(text, {k: v for k, v in env.items() if v})


def endpoint(config: Mapping[str, object], key: str, provider: str) -> str:
    """An optional metadata endpoint from the config (a test's loopback server)."""
    value = config.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise ConfigError(f"providers.{provider}.{key}: expected a URL or host:port, got {value!r}")
    return value.strip()
