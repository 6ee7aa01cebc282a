"""Where an API-key provider (Lambda, Vast.ai, RunPod) finds its key and its API base.

The order is the same for all of them: the provider's environment variable, then the
``api_key`` config key (discouraged), then the key files the vendor's own CLI writes under
``$HOME``. ``availability()`` reports which of those was used, never the key itself. This
module reads only the places it is told to and must not log or store the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudgpu.errors import ProviderError
from cloudgpu.httpjson import RetryOptions
from cloudgpu.provider import Availability, ProviderContext

# A key file: its path under $HOME and how to read the key out of it ("" when none).
KeyFile = tuple[str, Callable[[Path], str]]


def read_plain_key(path: Path) -> str:
    """A file holding nothing but the key; "" when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


@dataclass(frozen=True)
class ApiKeySource:
    """One provider's key lookup: ``label`` names the vendor in messages."""

    label: str
    env_var: str
    provider: str
    files: tuple[KeyFile, ...] = ()

    def looked(self) -> tuple[str, ...]:
        return (f"env:{self.env_var}", "config:api_key", *(f"file:~/{f}" for f, _ in self.files))

    def find(self, ctx: ProviderContext) -> tuple[str, str]:
        """(key, where it came from), or ("", "") when there is none."""
        key = ctx.env.get(self.env_var, "").strip()
        if key:
            return key, f"env:{self.env_var}"
        key = str(ctx.config.get("api_key") or "").strip()
        if key:
            return key, "config:api_key"
        home = ctx.env.get("HOME")
        for rel, read in self.files if home else ():
            key = read(Path(str(home)) / rel)
            if key:
                return key, f"file:~/{rel}"
        return "", ""

    def availability(self, ctx: ProviderContext) -> Availability:
        key, source = self.find(ctx)
        if not key:
            return Availability(
                False, f"no {self.label} API key (set {self.env_var})", self.looked()
            )
        return Availability(True, f"API key from {source}", self.looked())

    def require(self, ctx: ProviderContext) -> str:
        """The key, or a ProviderError saying how to give one."""
        key, _ = self.find(ctx)
        if not key:
            raise ProviderError(
                f"no {self.label} API key", provider=self.provider, hint=f"set {self.env_var}"
            )
        return key


def api_base(ctx: ProviderContext, config_key: str, env_var: str, default: str) -> str:
    """The API base URL: config, then the environment variable, then the public one."""
    return str(ctx.config.get(config_key) or ctx.env.get(env_var) or default)


def retry_options(config: Mapping[str, Any]) -> RetryOptions:
    """The ``attempts`` / ``backoff_s`` config keys as client keyword arguments."""
    return {
        "attempts": int(config.get("attempts", 5)),
        "backoff_s": float(config.get("backoff_s", 1.0)),
    }


def probed(av: Availability, call: Callable[[], object], what: str) -> Availability:
    """``check()``'s shape: when the key is there, make one real call (it raises on
    failure) and say it answered."""
    if not av.enabled:
        return av
    call()
    return Availability(True, f"{av.reason}; {what} answered", av.sources)
