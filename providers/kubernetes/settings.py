"""The ``[providers.kubernetes]`` table, validated into one frozen Settings.

The provider is opt-in: it is enabled by having the table (``enabled = true`` is
enough), never by a kubeconfig merely existing, so a plan never schedules GPU work onto
a cluster the user did not offer::

    [providers.kubernetes]
    enabled = true
    kubeconfig = "~/.kube/config"        # default: $KUBECONFIG, then ~/.kube/config
    context = "gpu-cluster"              # default: the kubeconfig's current context
    namespace = "ml"                     # default: the context's namespace, else "default"
    image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"   # when the job sets none
    price_per_gpu_hour = 1.20            # GPUs the cluster owns (default: the node's
    price_per_cpu_hour = 0.02            #   cloud instance type's price in the catalog)
    cluster = "ml-prod"                  # region when nodes carry no topology label
    service_account = "trainer"          # pods' service account (default: the namespace's)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudgpu.errors import ConfigError

DEFAULT_IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
_KEYS = {
    "enabled",
    "kubeconfig",
    "context",
    "namespace",
    "image",
    "price_per_gpu_hour",
    "price_per_cpu_hour",
    "cluster",
    "service_account",
}


@dataclass(frozen=True)
class Settings:
    kubeconfig: str
    context: str = ""
    namespace: str = ""
    image: str = DEFAULT_IMAGE
    price_per_gpu_hour: float | None = None
    price_per_cpu_hour: float | None = None
    cluster: str = ""
    service_account: str = ""


def _price(config: Mapping[str, Any], key: str) -> float | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e4:
        raise ConfigError(
            f"providers.kubernetes.{key}: expected a price in USD between 0 and 10000"
        )
    return float(value)


def _name(config: Mapping[str, Any], key: str) -> str:
    value = config.get(key, "")
    if not isinstance(value, str) or (value and not _DNS_LABEL.match(value)):
        raise ConfigError(
            f"providers.kubernetes.{key}: expected a DNS label (lowercase letters, digits, '-')"
        )
    return value


def parse(config: Mapping[str, Any], env: Mapping[str, str], home: Path) -> Settings | None:
    """Settings from the table; None when there is no table (the provider is off)."""
    if not config or config.get("enabled") is False:
        return None
    unknown = set(config) - _KEYS
    if unknown:
        raise ConfigError(
            f"providers.kubernetes: unknown key(s) {', '.join(sorted(unknown))}; "
            f"expected: {', '.join(sorted(_KEYS))}"
        )
    for key in ("kubeconfig", "context", "image", "cluster"):
        if not isinstance(config.get(key, ""), str):
            raise ConfigError(f"providers.kubernetes.{key}: expected a string")
    image = config.get("image") or DEFAULT_IMAGE
    if not _IMAGE.match(image):
        raise ConfigError("providers.kubernetes.image: expected an image reference")
    first = (env.get("KUBECONFIG") or "").split(":")[0]
    kubeconfig = config.get("kubeconfig") or first or str(home / ".kube" / "config")
    return Settings(
        kubeconfig=str(Path(kubeconfig).expanduser()),
        context=config.get("context", ""),
        namespace=_name(config, "namespace"),
        image=image,
        price_per_gpu_hour=_price(config, "price_per_gpu_hour"),
        price_per_cpu_hour=_price(config, "price_per_cpu_hour"),
        cluster=config.get("cluster", ""),
        service_account=_name(config, "service_account"),
    )
