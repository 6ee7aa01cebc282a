"""Runner pools for `cloudgpu runner serve`: which queued jobs get which GPU machine.

``runners.toml``::

    webhook_secret_env = "CLOUDGPU_WEBHOOK_SECRET"   # the secret is read from this env var
    listen = "127.0.0.1:8787"
    max_concurrency = 10                              # runners starting/alive at once, all pools
    allow_public_repos = false                        # refuse public repositories unless true

    [[pools]]
    name = "a100"
    labels = ["gpu-a100"]          # a job whose runs-on labels are all in these (plus
                                   # GitHub's defaults) is served by this pool
    gpu = "A100:1"
    max_price = 4.0
    providers = ["aws", "runpod"]
    max_concurrent = 4
    spot = false
    ttl = "3h"
    idle_timeout = "10m"

Pools scale to zero: nothing runs until a job is queued.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudgpu.errors import ConfigError
from cloudgpu.runners.github import DEFAULT_LABELS, validate_labels
from cloudgpu.spec.units import parse_duration_s


@dataclass(frozen=True)
class Pool:
    name: str
    labels: frozenset[str]
    gpu: str
    max_price: float | None = None
    providers: tuple[str, ...] = ()
    max_concurrent: int = 4
    spot: bool = False
    ttl_s: float = 3 * 3600
    idle_timeout_s: float = 600

    def serves(self, job_labels: tuple[str, ...]) -> bool:
        wanted = {label.lower() for label in job_labels} - DEFAULT_LABELS
        return bool(wanted) and wanted <= {label.lower() for label in self.labels}


@dataclass(frozen=True)
class ServeConfig:
    pools: tuple[Pool, ...]
    secret_env: str = "CLOUDGPU_WEBHOOK_SECRET"
    listen: str = "127.0.0.1:8787"
    max_concurrency: int = 10
    allow_public_repos: bool = False

    def pool_for(self, job_labels: tuple[str, ...]) -> Pool | None:
        return next((p for p in self.pools if p.serves(job_labels)), None)


def _pool(path: Path, i: int, raw: Any) -> Pool:
    where = f"{path}: pools[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    known = {
        "name",
        "labels",
        "gpu",
        "max_price",
        "providers",
        "max_concurrent",
        "spot",
        "ttl",
        "idle_timeout",
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}")
    for key in ("name", "labels", "gpu"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}: required")
    labels = raw["labels"]
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels) or not labels:
        raise ConfigError(f"{where}.labels: expected a non-empty list of strings")
    try:
        validate_labels(labels)
        return Pool(
            name=str(raw["name"]),
            labels=frozenset(labels),
            gpu=str(raw["gpu"]),
            max_price=float(raw["max_price"]) if raw.get("max_price") is not None else None,
            providers=tuple(raw.get("providers", ())),
            max_concurrent=int(raw.get("max_concurrent", 4)),
            spot=bool(raw.get("spot", False)),
            ttl_s=parse_duration_s(str(raw.get("ttl", "3h"))),
            idle_timeout_s=parse_duration_s(str(raw.get("idle_timeout", "10m"))),
        )
    except (ConfigError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def load_serve_config(path: Path) -> ServeConfig:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such file") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    raw_pools = data.get("pools")
    if not isinstance(raw_pools, list) or not raw_pools:
        raise ConfigError(f"{path}: pools: expected at least one [[pools]] table")
    pools = tuple(_pool(path, i, p) for i, p in enumerate(raw_pools))
    max_conc = data.get("max_concurrency", 10)
    if not isinstance(max_conc, int) or max_conc < 1:
        raise ConfigError(f"{path}: max_concurrency: expected a positive integer")
    return ServeConfig(
        pools=pools,
        secret_env=str(data.get("webhook_secret_env", "CLOUDGPU_WEBHOOK_SECRET")),
        listen=str(data.get("listen", "127.0.0.1:8787")),
        max_concurrency=max_conc,
        allow_public_repos=bool(data.get("allow_public_repos", False)),
    )
