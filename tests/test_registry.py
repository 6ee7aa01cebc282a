"""Registry.enabled: the one way a sweep or runner gc asks every provider."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from cloudgpu.provider import Availability
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
