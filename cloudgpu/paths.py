"""Where cloudgpu keeps its files: config, data (state store, keys, logs) and cache.

``CLOUDGPU_HOME`` relocates all three under one directory (tests use it); otherwise the
platform's XDG directories are used. This module only computes paths; it creates
directories on request and never reads them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cloudgpu.errors import ConfigError


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    data_dir: Path
    cache_dir: Path

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.toml"

    @property
    def state_db(self) -> Path:
        return self.data_dir / "state.db"

    @property
    def catalog_cache(self) -> Path:
        return self.cache_dir / "catalog"

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def ensure(self) -> Paths:
        for d in (self.config_dir, self.data_dir, self.cache_dir):
            try:
                d.mkdir(mode=0o700, parents=True, exist_ok=True)  # the owner's only
            except FileExistsError:  # a file, or a dangling symlink, where a directory goes
                raise ConfigError(
                    f"{_first_non_directory(d)}: exists and is not a directory; cloudgpu keeps "
                    "its files in directories there",
                    hint="move it away, or point CLOUDGPU_HOME somewhere else",
                ) from None
        return self


def _first_non_directory(path: Path) -> Path:
    """The first of ``path`` and its parents that exists (or dangles) but is no directory."""
    for p in [*reversed(path.parents), path]:
        if (p.exists() or p.is_symlink()) and not p.is_dir():
            return p
    return path


def default_paths(env: dict[str, str] | None = None) -> Paths:
    env = dict(os.environ) if env is None else env
    home = env.get("CLOUDGPU_HOME")
    if home:
        root = Path(home).expanduser()
        return Paths(root / "config", root / "data", root / "cache")
    user_home = Path(env.get("HOME") or Path.home())
    config = Path(env.get("XDG_CONFIG_HOME") or user_home / ".config") / "cloudgpu"
    data = Path(env.get("XDG_DATA_HOME") or user_home / ".local" / "share") / "cloudgpu"
    cache = Path(env.get("XDG_CACHE_HOME") or user_home / ".cache") / "cloudgpu"
    return Paths(config, data, cache)
