"""The user's configuration file (``config.toml`` in the config dir).

Layout::

    [defaults]
    providers = ["aws", "runpod"]     # restrict which enabled providers are used
    stale_after_days = 30

    [providers.aws]                   # one table per provider, passed to it as-is
    regions = ["us-east-1"]           # every provider: only offers there (globs)
    endpoint_url = "http://127.0.0.1:5000"   # e.g. a moto server in tests

    [providers.sim]
    enabled = true

Secrets do not belong here: providers read them from their standard credential chains.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudgpu.errors import ConfigError


@dataclass(frozen=True)
class Config:
    data: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None

    def provider(self, name: str) -> dict[str, Any]:
        """The ``[providers.NAME]`` table (empty when absent)."""
        table = self.data.get("providers", {}).get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{self.source}: providers.{name}: expected a table")
        return table

    def provider_regions(self) -> dict[str, list[str]]:
        """``regions`` of every ``[providers.NAME]`` table: the one key the core reads
        from a provider's table (globs; that provider's offers elsewhere are not used)."""
        out: dict[str, list[str]] = {}
        for name in self.data.get("providers", {}):
            value = self.provider(name).get("regions")
            if value is None:
                continue
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(
                    f"{self.source}: providers.{name}.regions: expected a list of region "
                    'names or globs, e.g. ["us-east-1", "eu-*"]'
                )
            if value:
                out[name] = value
        return out

    def defaults(self) -> dict[str, Any]:
        table = self.data.get("defaults", {})
        return table if isinstance(table, dict) else {}

    def section(self, name: str) -> dict[str, Any]:
        table = self.data.get(name, {})
        return table if isinstance(table, dict) else {}

    def seconds(self, section: str, key: str, default: float) -> float:
        """A positive number of seconds from ``[section] key`` (e.g. launch.ssh_timeout)."""
        value = self.section(section).get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            raise ConfigError(f"{self.source}: {section}.{key}: expected seconds > 0")
        return float(value)


def load_config(path: Path) -> Config:
    """Read ``path``; a missing file is an empty config, a broken one a ConfigError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config({}, None)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: not valid TOML: {exc}", hint="fix the file or move it away"
        ) from exc
    providers = data.get("providers", {})
    if not isinstance(providers, dict):
        raise ConfigError(f"{path}: providers: expected a table of [providers.NAME] tables")
    return Config(data, path)
