"""The Azure provider's small helpers: config values read with a clear error, the
caller's address for the NSG, the GPU canonicalizer for offers, OData quoting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.azure import retail, sizes
from cloudgpu_providers.azure.arm import ArmSettings
from cloudgpu_providers.callerip import caller_cidr, normalized_cidr

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.errors import CatalogError, ConfigError


def ssh_cidr(cfg: Mapping[str, Any], default_lookup: str) -> str:
    """Who may reach SSH: ``ssh_cidr``, else this machine's address /32 asked of
    ``ip_lookup_url``."""
    raw = cfg.get("ssh_cidr")
    if raw:
        try:
            return normalized_cidr(raw)
        except ValueError as exc:
            raise ConfigError(
                f"providers.azure.ssh_cidr: '{raw}' is not a CIDR", hint="e.g. 203.0.113.7/32"
            ) from exc
    return caller_cidr("azure", str(cfg.get("ip_lookup_url") or default_lookup), 10.0)


def ssh_port(cfg: Mapping[str, Any]) -> int:
    raw = cfg.get("ssh_port", 22)
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw < 65536:
        raise ConfigError(f"providers.azure.ssh_port: expected a port number, got {raw!r}")
    return raw


def arm_settings(cfg: Mapping[str, Any]) -> ArmSettings:
    try:
        return ArmSettings.from_config(cfg)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            "providers.azure: polling_interval and retry_total must be numbers"
        ) from exc


def timeout(cfg: Mapping[str, Any], key: str) -> float:
    try:
        value = float(cfg.get(key, 1800))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"providers.azure.{key}: expected seconds") from exc
    if value <= 0:
        raise ConfigError(f"providers.azure.{key}: expected seconds > 0")
    return value


def canonicalizer() -> retail.Canonicalize:
    registry = load_registry()

    def canonical(raw: str, memory_gb: float) -> str | None:
        try:
            found = sizes.size_gpu(raw) or registry.canonical(raw, memory_gb)
        except CatalogError:
            return None
        return found or None

    return canonical


def as_float(text: str | None) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def odata_quote(value: str) -> str:
    return value.replace("'", "''")  # OData string literal escaping
