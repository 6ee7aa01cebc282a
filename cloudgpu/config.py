"""The user's configuration file (``config.toml`` in the config dir), validated like a
job file: unknown keys get a did-you-mean, wrong types and impossible values a one-line
error with ``file:line: key``.

Layout::

    [defaults]
    providers = ["aws", "runpod"]     # restrict which enabled providers are used
    stale_after_days = 30

    [providers.aws]                   # one table per provider; its keys are declared by
    regions = ["us-east-1"]           # the provider (Provider.config_keys) and checked;
    endpoint_url = "http://127.0.0.1:5000"   # by the registry; regions: only offers there

    [providers.sim]
    enabled = true

    [launch]                          # ssh_timeout, deadline_grace, ... (seconds or "5m")
    [runner]                          # `cloudgpu runner` settings
    [buy_vs_rent]                     # buy-vs-rent inputs (checked by the App)

The sections here are checked at load; ``[providers.NAME]`` tables when the registry is
built. Secrets do not belong here: providers read them from their standard credential
chains.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudgpu.errors import ConfigError
from cloudgpu.spec.fields import (
    ANY,
    Block,
    FieldError,
    ListOf,
    Node,
    Value,
    check,
    is_number,
    number,
    shown,
    text,
    unit,
)
from cloudgpu.spec.units import DURATION_FORM, DURATION_PATTERN, parse_duration_s
from cloudgpu.userfile import UnreadableFile, read_user_text

MAX_CONFIG_BYTES = 4 << 20
_SECONDS = 86_400.0  # at most a day for a timeout


def _seconds(description: str, hi: float = _SECONDS) -> Value:
    """Seconds as a number, or a duration in the one grammar of job files ("5m", "1h30m")."""
    return unit(
        description, as_seconds, DURATION_PATTERN, 0, hi, f"seconds or {DURATION_FORM}",
        lo_open=True,
    )  # fmt: skip


def as_seconds(value: object) -> float:
    if isinstance(value, int | float) and is_number(value):
        return float(value)
    try:
        return parse_duration_s(value)
    except ValueError:
        raise ValueError(f"expected seconds or {DURATION_FORM}, got {shown(value)}") from None


SECTIONS: dict[str, Node] = {
    "defaults": Block(
        {
            "providers": ListOf(text(form="a provider name", max_len=100), scalar_ok=True),
            "stale_after_days": number("prices older than this are stale", 0, 36_500),
        }
    ),
    # Each provider's table is checked against its own keys by the registry.
    "providers": Block(values=Block(values=ANY)),
    "launch": Block(
        {
            "ssh_timeout": _seconds("how long a new instance may take to answer SSH"),
            "deadline_grace": _seconds("past max_runtime before the instance-side deadline"),
            "retry_backoff": _seconds("first wait between rounds of --retry-until-up"),
            "default_deadline": _seconds(
                "instance-side deadline of a job without max_runtime", 365 * _SECONDS
            ),
            "collect_grace": _seconds(
                "how long an instance holding uncollected outputs is kept", 30 * _SECONDS
            ),
            "max_preemptions": number(
                "preemptions a job may survive", 0, 1000, integer=True, lo_open=False
            ),
        }
    ),
    "runner": Block(
        {
            "token_env": text(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", form="a variable name"),
            "api_url": text(form="a URL"),
            "runner_url": text(form="a URL"),
            "runner_sha256": text(pattern=r"^[0-9a-fA-F]{64}$", form="a SHA-256 in hex"),
            "runner_version": text(form="a version like 2.320.0"),
            "online_timeout_s": _seconds("how long a runner may take to come online"),
            "boot_grace_s": _seconds("how long an instance may take to boot"),
        }
    ),
    # Open here; the App checks its keys and values with the buy-vs-rent model's own.
    "buy_vs_rent": Block(values=ANY),
}


@dataclass(frozen=True)
class Config:
    data: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None
    text: str = field(default="", repr=False)  # for locating keys in error messages

    def provider(self, name: str) -> dict[str, Any]:
        """The ``[providers.NAME]`` table (empty when absent)."""
        table = self.data.get("providers", {}).get(name, {})
        if not isinstance(table, dict):
            raise self.error(f"providers.{name}", "expected a table")
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
        try:
            seconds = as_seconds(value)
        except (ValueError, TypeError):
            seconds = math.nan
        if not seconds > 0:  # checked at load for declared keys; this guards the rest
            raise self.error(f"{section}.{key}", f"expected seconds > 0 or {DURATION_FORM}")
        return seconds

    def error(self, key: str, message: str, hint: str | None = None) -> ConfigError:
        """A ConfigError at ``file:line: key`` (the line found by :func:`locate`)."""
        line = None
        parts = key.split(".")
        while parts and line is None:  # a missing key: the line of the table it belongs in
            line = locate(self.text, ".".join(parts))
            parts.pop()
        where = f"{self.source}:{line}" if line else str(self.source or "config")
        return ConfigError(f"{where}: {key}: {message}", hint=hint)

    def check(self, key: str, defn: Node, value: Any) -> Any:
        """``value`` (at ``key``) checked against ``defn``; a located ConfigError if not."""
        try:
            return check(defn, value, key)
        except FieldError as exc:
            raise self.error(exc.key, str(exc)) from None


def load_config(
    path: Path,
    sections: Mapping[str, Node] | None = None,
    *,
    base: Mapping[str, Node] = SECTIONS,
) -> Config:
    """Read and check ``path``; a missing file is an empty config, a broken one a
    ConfigError naming file, line and key. ``sections`` adds definitions (or replaces
    open ones) for sections other modules own; ``base`` is the file's own layout
    (config.toml's by default; ``{}`` for a file that another module defines whole)."""
    try:
        text = read_user_text(path, "config file", MAX_CONFIG_BYTES)
    except UnreadableFile as exc:
        if exc.missing:
            return Config({}, None)
        line = f":{exc.line}" if exc.line else ""
        hint = exc.hint or "fix the file or move it away"
        raise ConfigError(f"{path}{line}: {exc}", hint=hint) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+)", str(exc))
        line = f":{m.group(1)}" if m else ""
        raise ConfigError(
            f"{path}{line}: not valid TOML: {str(exc)[:200]}", hint="fix the file or move it away"
        ) from exc
    config = Config(data, path, text)
    config.check("", Block({**base, **(sections or {})}), data)
    return config


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")


def locate(text: str, key: str) -> int | None:
    """The line of ``key`` (dotted, with [i] list indexes) in TOML ``text``: the header of
    the table it lives in, then the first ``name =`` line under it; None when not found.
    Good enough for messages; the TOML parser has no positions."""
    parts = [p for p in re.sub(r"\[\d+\]", "", key).split(".") if p]
    if not parts:
        return None
    *table, name = parts
    current: list[str] = []
    fallback = None
    assign = re.compile(rf"^\s*(?:[\"']?{re.escape(name)}[\"']?)\s*=")
    for i, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            current = [p.strip().strip("\"'") for p in m.group(1).split(".")]
            if current == parts:
                return i
            continue
        if assign.match(line):
            if current == table:
                return i
            fallback = fallback or i
        elif current == table[: len(current)] and re.search(rf"\b{re.escape(name)}\b", line):
            fallback = fallback or i  # a dotted key or an inline table
    return fallback
