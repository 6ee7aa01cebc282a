"""Registry.enabled: the one way a sweep or runner gc asks every provider; Registry.capabilities:
the one lookup of what a provider declares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from cloudgpu.provider import Availability, Capabilities, ProviderContext
from tests.cli.fakes import FAKES, FakeRegistry, _Base, fake_app


class NoSdk(_Base):
    name: ClassVar[str] = "nosdk"

    def availability(self) -> Availability:
        return Availability(False, "not enabled: install cloudgpu[nosdk]", extra="nosdk")


def test_enabled_skips_broken_and_sdk_less_providers_and_says_why(tmp_path: Path) -> None:
    app = fake_app(tmp_path / "home")
    registry = FakeRegistry(app.config, app.paths, app.env, extra={**FAKES, "nosdk": NoSdk})
    skipped: list[tuple[str, str]] = []
    got = {p.name for p in registry.enabled(on_skip=lambda n, why: skipped.append((n, why)))}
    assert got == {"goodcloud", "lockedcloud", "busycloud", "staticcloud", "ownboxes"}
    assert dict(skipped) == {
        "brokencloud": "No module named 'brokensdk'",
        "nosdk": "not enabled: install cloudgpu[nosdk]",
    }  # offcloud is plainly disabled: left out quietly
    assert [p.name for p in registry.enabled(["goodcloud", "offcloud"])] == ["goodcloud"]


class Hourly(_Base):
    name: ClassVar[str] = "hourly"
    capabilities: ClassVar[Capabilities] = Capabilities(billing_granularity_s=3600, spot=True)

    def __init__(self, ctx: ProviderContext) -> None:
        raise AssertionError("capabilities are read from the class, never an instance")


def test_capabilities_come_from_the_class_and_default_for_an_unknown_plugin(
    tmp_path: Path,
) -> None:
    """The one lookup status, down --purge, the plan's startup and billing and the spot
    filter use: the class's declaration, nothing instantiated; a plugin that cannot be
    loaded or is not installed gets the defaults (billed per second, no spot)."""
    app = fake_app(tmp_path / "home")
    registry = FakeRegistry(app.config, app.paths, app.env, extra={**FAKES, "hourly": Hourly})
    assert registry.capabilities("hourly") is Hourly.capabilities
    assert registry.capabilities("brokencloud") == Capabilities()  # its SDK import fails
    assert registry.capabilities("no-such-cloud") == Capabilities()


def test_whatif_providers_are_declared_in_metadata_and_read_without_importing_them(
    tmp_path: Path,
) -> None:
    """`plan --all-providers` asks the declared ones (cloudgpu.whatif entry points);
    finding them must load no plugin (ssh would import paramiko)."""
    code = (
        "import sys\n"
        "from cloudgpu.registry import Registry\n"
        "print(Registry(None, None, {}).whatif_names())\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cloudgpu.builtin', "
        "'cloudgpu_providers', 'paramiko'))))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.splitlines() == ["['local']", "[]"], run.stdout + run.stderr
    app = fake_app(tmp_path / "home")
    assert app.registry.whatif_names() == []  # only installed providers count
