"""Finds provider plugins through the ``cloudgpu.providers`` entry-point group.

Only the provider in use is imported: listing names reads package metadata, not code.
Tests add a plugin by passing ``extra`` (name -> class) instead of patching this module.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from cloudgpu.config import Config
from cloudgpu.errors import CloudGPUError, ConfigError
from cloudgpu.paths import Paths
from cloudgpu.provider import Capabilities, Provider, ProviderContext
from cloudgpu.spec.fields import Block, ListOf, Node, number, text

GROUP = "cloudgpu.providers"
# Providers a what-if (`plan --all-providers`) asks for their own offers even when neither
# the job nor the config names them: they list them with no SDK, network or account (the
# built-in local: this machine). A plugin declares it with a second entry point of the
# same name in this group; it is read from package metadata, so nothing is imported.
WHATIF_GROUP = "cloudgpu.whatif"
# Keys every [providers.NAME] table may hold, whatever the provider declares: the core
# reads them itself (regions: only that provider's offers in these regions are used).
COMMON_KEYS: dict[str, Node] = {
    "regions": ListOf(text(form="a region name or glob", max_len=200), scalar_ok=True),
    # Seconds between outside preemption polls (cloudgpu.lifecycle.watch).
    "notice_poll_s": number("seconds", 0, 3600, unit="seconds", lo_open=False),
}


@cache
def _group(group: str) -> dict[str, EntryPoint]:
    """One entry-point group; every group is read in one pass over the metadata."""
    return {ep.name: ep for ep in _every_entry_point().select(group=group)}


@cache
def _every_entry_point() -> Any:
    # Python 3.11 returns a SelectableGroups, later ones EntryPoints: both select(group=).
    return entry_points()


def _entry_points() -> dict[str, EntryPoint]:
    return _group(GROUP)


class Registry:
    """Provider classes by name, instantiated on demand with their own context."""

    def __init__(
        self,
        config: Config,
        paths: Paths,
        env: Mapping[str, str],
        extra: Mapping[str, type[Provider]] | None = None,
    ) -> None:
        self.config = config
        self.paths = paths
        self.env = env
        self._extra = dict(extra or {})
        self._instances: dict[str, Provider] = {}
        self._caps: dict[str, Capabilities] = {}

    def names(self) -> list[str]:
        return sorted(set(_entry_points()) | set(self._extra))

    def whatif_names(self) -> list[str]:
        """Installed providers that declare themselves worth asking in a what-if
        (:data:`WHATIF_GROUP`), read from metadata without importing them."""
        return sorted(set(_group(WHATIF_GROUP)) & set(self.names()))

    def provider_class(self, name: str) -> type[Provider]:
        if name in self._extra:
            return self._extra[name]
        ep = _entry_points().get(name)
        if ep is None:
            close = difflib.get_close_matches(name, self.names(), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else None
            raise ConfigError(
                f"unknown provider '{name}' (installed: {', '.join(self.names())})", hint=hint
            )
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            raise ConfigError(f"entry point {GROUP}:{name} is not a cloudgpu Provider class")
        return cls

    def capabilities(self, name: str) -> Capabilities:
        """``name``'s declared Capabilities, read from its class (never instantiated, so
        a status or a plan stays a read); a plugin that cannot be loaded (a what-if over
        one not installed) gets the defaults: 300 s startup, billed per second, no spot."""
        if name not in self._caps:
            try:
                self._caps[name] = self.provider_class(name).capabilities
            except (CloudGPUError, ImportError):
                self._caps[name] = Capabilities()
        return self._caps[name]

    def check_config(self) -> None:
        """Check every ``[providers.NAME]`` table: NAME installed (did-you-mean), and its
        keys against the provider's declared ones. Raises a located ConfigError."""
        tables = self.config.data.get("providers", {})
        for name, table in tables.items():
            if name not in self.names():
                close = difflib.get_close_matches(name[:100], self.names(), n=1, cutoff=0.6)
                guess = f"did you mean '{close[0]}'? " if close else ""
                raise self.config.error(
                    f"providers.{name}",
                    f"unknown provider; {guess}installed: {', '.join(self.names())}",
                )
            try:
                keys = self.provider_class(name).config_keys
            except (ImportError, ConfigError):
                continue  # `check` reports a plugin that cannot load
            if keys is not None:
                self.config.check(f"providers.{name}", Block({**COMMON_KEYS, **keys}), table)

    def get(self, name: str) -> Provider:
        if name not in self._instances:
            cls = self.provider_class(name)
            ctx = ProviderContext(config=self.config.provider(name), paths=self.paths, env=self.env)
            self._instances[name] = cls(ctx)
        return self._instances[name]

    def enabled(
        self,
        names: Iterable[str] | None = None,
        on_skip: Callable[[str, str], None] | None = None,
    ) -> list[Provider]:
        """Providers enabled now (optionally only ``names``), for whoever must ask every
        one of them (sweeps, runner gc). One that fails to load, or whose SDK extra is
        missing (it may have instances this install cannot reach), is told to ``on_skip``
        with the reason; a plainly disabled one is left out quietly."""
        out = []
        for name in names if names is not None else self.names():
            try:
                p = self.get(name)
                av = p.availability()
            except (ImportError, AttributeError, CloudGPUError) as exc:
                if on_skip is not None:
                    on_skip(name, str(exc))
                continue
            if av.enabled:
                out.append(p)
            elif av.extra and on_skip is not None:
                on_skip(name, av.reason)
        return out


def has_live_prices(provider: Provider) -> bool:
    """Whether the plugin overrides fetch_offers (a capability, not a name check)."""
    return type(provider).fetch_offers is not Provider.fetch_offers
