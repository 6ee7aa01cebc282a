"""The instance-side preemption watchers (templates/watchers/<cloud>.sh) as the
NoticeWatcher a provider hands the bootstrap (cloudgpu/lifecycle/bootstrap.py)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

from cloudgpu.errors import ConfigError
from cloudgpu.provider import NoticeWatcher


def watcher(name: str, env: Mapping[str, str]) -> NoticeWatcher:
    """templates/watchers/``name``.sh with its settings (only those that are set)."""
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
