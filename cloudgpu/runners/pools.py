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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudgpu.config import Config, load_config
from cloudgpu.errors import ConfigError
from cloudgpu.runners.github import DEFAULT_LABELS, validate_labels
from cloudgpu.spec import units
from cloudgpu.spec.fields import Block, ListOf, Node, Value, flag, number, text, unit

_MAX_LIFE_S = 30 * 86400.0  # a runner lives hours; a month is surely a typo


def _life(description: str) -> Value:
    return unit(
        description, units.parse_duration_s, units.DURATION_PATTERN, 0, _MAX_LIFE_S,
        units.DURATION_FORM, numbers=False, lo_open=True,
    )  # fmt: skip


# runners.toml, checked like config.toml: unknown keys with a did-you-mean, wrong types
# and impossible values (NaN prices, "no" for a boolean) one line at file:line: key.
POOL = Block(
    {
        "name": text(form="a pool name", max_len=100),
        "labels": ListOf(text(pattern=r"^[^,]+$", form="a label without commas", max_len=256)),
        "gpu": text(form='a GPU request like "A100:1"', max_len=100),
        "max_price": number("USD per hour, whole instance", 0, 10_000, unit="USD per hour"),
        "providers": ListOf(text(form="a provider name", max_len=100), scalar_ok=True),
        "max_concurrent": number("runners of this pool at once", 0, 10_000, integer=True),
        "spot": flag("spot/preemptible capacity"),
        "ttl": _life("hard lifetime of an instance"),
        "idle_timeout": _life("power off after this long without a job"),
    },
    required=("name", "labels", "gpu"),
)
SERVE: dict[str, Node] = {
    "webhook_secret_env": text(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", form="a variable name"),
    "listen": text(form="HOST:PORT", max_len=300),
    "max_concurrency": number("runners starting or alive at once", 0, 10_000, integer=True),
    "allow_public_repos": flag("serve public repositories"),
    "pools": ListOf(POOL),
}


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


def _pool(config: Config, i: int, raw: dict[str, Any]) -> Pool:
    if not raw["labels"]:
        raise config.error(f"pools[{i}].labels", "expected a non-empty list of labels")
    try:
        validate_labels(raw["labels"])
    except ConfigError as exc:
        raise config.error(f"pools[{i}].labels", str(exc), exc.hint) from None
    return Pool(
        name=raw["name"],
        labels=frozenset(raw["labels"]),
        gpu=raw["gpu"],
        max_price=raw.get("max_price"),
        providers=tuple(raw.get("providers", ())),
        max_concurrent=raw.get("max_concurrent", 4),
        spot=raw.get("spot", False),
        ttl_s=raw.get("ttl", 3 * 3600.0),
        idle_timeout_s=raw.get("idle_timeout", 600.0),
    )


def load_serve_config(path: Path) -> ServeConfig:
    """Read and check ``runners.toml``; a ConfigError naming file, line and key if not."""
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{path}: no such file")
    config = load_config(path, SERVE, base={})
    data = config.check("", Block(SERVE), config.data)  # the values as parsed (seconds)
    raw_pools = data.get("pools")
    if not raw_pools:
        raise config.error("pools", "expected at least one [[pools]] table")
    return ServeConfig(
        pools=tuple(_pool(config, i, p) for i, p in enumerate(raw_pools)),
        secret_env=data.get("webhook_secret_env", "CLOUDGPU_WEBHOOK_SECRET"),
        listen=data.get("listen", "127.0.0.1:8787"),
        max_concurrency=data.get("max_concurrency", 10),
        allow_public_repos=data.get("allow_public_repos", False),
    )
