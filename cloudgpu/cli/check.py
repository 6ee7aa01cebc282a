"""`cloudgpu check`: every installed provider, enabled or not and why.

Shows which credential sources each provider looked at (names of sources, never their
contents). `--verify` also makes each enabled provider's one cheap read-only API call
(Provider.check). A plugin that fails to import is reported on its own line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import click

from cloudgpu.cli import style
from cloudgpu.cli.context import App, get_app
from cloudgpu.errors import CloudGPUError, redact
from cloudgpu.registry import has_live_prices


@dataclass
class ProviderStatus:
    provider: str
    enabled: bool
    reason: str
    sources: list[str]
    live_prices: bool
    capabilities: dict[str, Any]
    error: str = ""  # the plugin could not be loaded or checked


def status_of(app: App, name: str, verify: bool) -> ProviderStatus:
    try:
        provider = app.registry.get(name)
    except Exception as exc:  # a broken plugin is one line of the report, not a crash
        msg = str(exc) if isinstance(exc, CloudGPUError) else f"{type(exc).__name__}: {exc}"
        return ProviderStatus(name, False, f"cannot load plugin: {msg}", [], False, {}, msg)
    caps = asdict(provider.capabilities)
    live = has_live_prices(provider)
    try:
        av = provider.check() if verify else provider.availability()
    except CloudGPUError as exc:
        return ProviderStatus(name, False, str(exc), [], live, caps, str(exc))
    except Exception as exc:  # plugin bug: report it, keep checking the others
        msg = f"{type(exc).__name__}: {exc}"
        return ProviderStatus(name, False, msg, [], live, caps, msg)
    return ProviderStatus(name, av.enabled, av.reason, list(av.sources), live, caps)


@click.command("check")
@click.option("--verify", is_flag=True, help="Also confirm credentials with one API call each.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def check(verify: bool, as_json: bool) -> None:
    """Which providers are enabled, and why (never printing a secret)."""
    app = get_app()
    statuses = [status_of(app, name, verify) for name in app.registry.names()]
    if as_json:
        click.echo(redact(json.dumps([asdict(s) for s in statuses], indent=2)))
        return
    width = max(8, *(len(s.provider) for s in statuses))
    for s in statuses:
        mark = style.state("enabled" if s.enabled else "disabled", width=8)
        click.echo(f"{s.provider:{width}}  {mark}  {redact(s.reason)}")
        if s.sources and "looked at" not in s.reason:
            click.echo(redact(f"{'':{width}}  looked at: {', '.join(s.sources)}"))
    enabled = [s.provider for s in statuses if s.enabled]
    click.echo(f"{len(enabled)} of {len(statuses)} providers enabled", err=True)
