"""The ``[providers.slurm]`` table, validated into one frozen Settings.

Every key but ``host`` is optional::

    [providers.slurm]
    host = "login.hpc.example.org"     # the login node, reached over SSH
    port = 22
    user = "alice"                     # default: the local user
    key = "~/.ssh/id_ed25519"          # default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa
    host_key = "SHA256:..."            # pin the login node's key (default: pinned on first use)
    cluster = "hpc"                    # shown as the offers' region (default: host)
    price_per_gpu_hour = 1.10          # what a GPU-hour of this cluster costs you
    price_per_cpu_hour = 0.02          # for CPU-only partitions
    scratch = "${TMPDIR:-/tmp}"        # node-local scratch, expanded by each node's shell
    account = "proj123"                # sbatch --account
    qos = "normal"                     # sbatch --qos
    sbatch_args = ["--constraint=ib"]  # anything else sbatch should get
    when_busy = "queue"                # queue | fail: fail over when no node is free now
    max_time = 86400                   # s; --time for jobs that set no max_runtime

    [providers.slurm.partitions.gpu]   # per partition: overrides, and `gpu` when the
    price_per_gpu_hour = 1.50          # GRES type names no known model ("gpu:tesla:4")
    gpu = "A100-80GB-SXM"

When ``partitions`` is given only those partitions are offered. A partition without
any price is not offered (an unpriced cluster would win every plan).
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudgpu.errors import ConfigError

DEFAULT_SCRATCH = "${TMPDIR:-/tmp}"
DEFAULT_MAX_TIME_S = 24 * 3600.0
DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")
WHEN_BUSY = ("queue", "fail")
# A scratch path is expanded by the node's shell: variables yes, command substitution no.
_SCRATCH_RE = re.compile(r"^[A-Za-z0-9_./${}:+-]+$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ARG_RE = re.compile(r"^--[A-Za-z][A-Za-z0-9-]*(=[^\s'\"`$;|&<>\\]*)?$")
_TOP = {
    "host",
    "port",
    "user",
    "key",
    "host_key",
    "cluster",
    "price_per_gpu_hour",
    "price_per_cpu_hour",
    "scratch",
    "account",
    "qos",
    "sbatch_args",
    "when_busy",
    "max_time",
    "partitions",
}
_PARTITION = {"price_per_gpu_hour", "price_per_cpu_hour", "gpu", "gpu_memory_gb"}


@dataclass(frozen=True)
class Partition:
    price_per_gpu_hour: float | None = None
    price_per_cpu_hour: float | None = None
    gpu: str = ""  # canonical GPU name for this partition's GRES
    gpu_memory_gb: float | None = None


@dataclass(frozen=True)
class Settings:
    host: str
    port: int = 22
    user: str = ""
    key: str = ""
    host_key: str = ""
    cluster: str = ""
    price_per_gpu_hour: float | None = None
    price_per_cpu_hour: float | None = None
    scratch: str = DEFAULT_SCRATCH
    account: str = ""
    qos: str = ""
    sbatch_args: tuple[str, ...] = ()
    when_busy: str = "queue"
    max_time_s: float = DEFAULT_MAX_TIME_S
    partitions: Mapping[str, Partition] = field(default_factory=dict)

    @property
    def region(self) -> str:
        return self.cluster or self.host

    def partition(self, name: str) -> Partition | None:
        """The partition's settings, or None when it is not to be offered."""
        if self.partitions:
            return self.partitions.get(name)
        return Partition()

    def gpu_price(self, name: str) -> float | None:
        p = self.partition(name)
        return (
            p.price_per_gpu_hour
            if p and p.price_per_gpu_hour is not None
            else (self.price_per_gpu_hour)
        )

    def cpu_price(self, name: str) -> float | None:
        p = self.partition(name)
        return (
            p.price_per_cpu_hour
            if p and p.price_per_cpu_hour is not None
            else (self.price_per_cpu_hour)
        )


def _where(key: str) -> str:
    return f"providers.slurm.{key}"


def _price(table: Mapping[str, Any], key: str, where: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e4:
        raise ConfigError(f"{where}.{key}: expected a price in USD between 0 and 10000")
    return float(value)


def _text(table: Mapping[str, Any], key: str, where: str, pattern: re.Pattern[str]) -> str:
    value = table.get(key, "")
    if not isinstance(value, str) or (value and not pattern.match(value)):
        raise ConfigError(f"{where}.{key}: expected a name of letters, digits, '.', '_', '-'")
    return value


def _partitions(raw: Any) -> dict[str, Partition]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{_where('partitions')}: expected a table of partition name = table")
    out = {}
    for name, table in raw.items():
        where = _where(f"partitions.{name}")
        if not _NAME_RE.match(str(name)) or not isinstance(table, Mapping):
            raise ConfigError(f"{where}: expected a partition name and a table of settings")
        unknown = set(table) - _PARTITION
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                f"expected: {', '.join(sorted(_PARTITION))}"
            )
        mem = table.get("gpu_memory_gb")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int | float)):
            raise ConfigError(f"{where}.gpu_memory_gb: expected a number of GB")
        gpu = table.get("gpu", "")
        if not isinstance(gpu, str):
            raise ConfigError(f'{where}.gpu: expected a GPU name like "A100-80GB-SXM"')
        out[str(name)] = Partition(
            _price(table, "price_per_gpu_hour", where),
            _price(table, "price_per_cpu_hour", where),
            gpu,
            float(mem) if mem is not None else None,
        )
    return out


def _sbatch_args(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(a, str) and _ARG_RE.match(a) for a in raw):
        raise ConfigError(
            f"{_where('sbatch_args')}: expected a list of long options like "
            '"--constraint=ib" (no spaces or shell characters)'
        )
    return tuple(raw)


def parse(config: Mapping[str, Any]) -> Settings | None:
    """Settings from the table; None when no login host is configured."""
    if not config.get("host"):
        return None
    unknown = set(config) - _TOP - {"enabled"}
    if unknown:
        raise ConfigError(
            f"providers.slurm: unknown key(s) {', '.join(sorted(unknown))}; "
            f"expected: {', '.join(sorted(_TOP))}"
        )
    host = config["host"]
    port = config.get("port", 22)
    if not isinstance(host, str) or not re.match(r"^[A-Za-z0-9.:_-]+$", host):
        raise ConfigError(f"{_where('host')}: expected a host name or address")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"{_where('port')}: expected a port number")
    scratch = config.get("scratch", DEFAULT_SCRATCH)
    if not isinstance(scratch, str) or not _SCRATCH_RE.match(scratch) or "$(" in scratch:
        raise ConfigError(
            f"{_where('scratch')}: expected a path, optionally with ${{VARIABLES}} "
            "the node's shell expands (no spaces, quotes or command substitution)"
        )
    when_busy = config.get("when_busy", "queue")
    if when_busy not in WHEN_BUSY:
        raise ConfigError(f"{_where('when_busy')}: expected one of {', '.join(WHEN_BUSY)}")
    max_time = config.get("max_time", DEFAULT_MAX_TIME_S)
    if isinstance(max_time, bool) or not isinstance(max_time, int | float) or max_time < 60:
        raise ConfigError(f"{_where('max_time')}: expected seconds >= 60")
    for key in ("user", "key", "host_key"):
        if not isinstance(config.get(key, ""), str):
            raise ConfigError(f"{_where(key)}: expected a string")
    return Settings(
        host=host,
        port=port,
        user=config.get("user") or getpass.getuser(),
        key=config.get("key", ""),
        host_key=config.get("host_key", ""),
        cluster=_text(config, "cluster", "providers.slurm", _NAME_RE),
        price_per_gpu_hour=_price(config, "price_per_gpu_hour", "providers.slurm"),
        price_per_cpu_hour=_price(config, "price_per_cpu_hour", "providers.slurm"),
        scratch=scratch,
        account=_text(config, "account", "providers.slurm", _NAME_RE),
        qos=_text(config, "qos", "providers.slurm", _NAME_RE),
        sbatch_args=_sbatch_args(config.get("sbatch_args")),
        when_busy=when_busy,
        max_time_s=float(max_time),
        partitions=_partitions(config.get("partitions")),
    )


def key_file(settings: Settings, home: Path) -> str:
    """The private key to log in with: configured, else the first default one found."""
    if settings.key:
        return str(Path(settings.key).expanduser())
    for name in DEFAULT_KEYS:
        if (home / ".ssh" / name).exists():
            return str(home / ".ssh" / name)
    raise ConfigError(
        'providers.slurm: no key = "..." and no ~/.ssh/id_* key found',
        hint='add key = "~/.ssh/your_key" under [providers.slurm]',
    )
