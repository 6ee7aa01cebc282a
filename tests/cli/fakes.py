"""Fake provider plugins for the catalog/check command tests, registered through
Registry's ``extra`` (no patching): each stands for one way a real plugin behaves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from cloudgpu.catalog.offer import Offer
from cloudgpu.cli.context import App
from cloudgpu.errors import AuthError, TransientError
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    Provider,
)
from cloudgpu.registry import Registry


class _Base(Provider):
    """Instance operations are not what these tests exercise."""

    name: ClassVar[str] = "base"

    def availability(self) -> Availability:
        return Availability(True, "token from env:FAKE_TOKEN", ("env:FAKE_TOKEN",))

    def create(self, request: CreateRequest) -> Instance:
        raise NotImplementedError("catalog tests create nothing")

    def describe(self, instance_id: str) -> Instance:
        raise NotImplementedError("catalog tests describe nothing")

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        return []

    def terminate(self, instance_id: str) -> None:
        raise NotImplementedError("catalog tests terminate nothing")


def _offer(provider: str, price: float) -> Offer:
    return Offer(
        provider=provider, instance_type="x8", region="r1", zone="r1a", market="on_demand",
        gpu="H100-SXM", gpu_count=8, gpu_memory_gb=80, vcpus=96, memory_gb=1024,
        price_per_hour=price, price_source=f"{provider}:price-api",
    )  # fmt: skip


class GoodCloud(_Base):
    name: ClassVar[str] = "goodcloud"
    capabilities: ClassVar[Capabilities] = Capabilities(spot=True)

    def fetch_offers(self) -> list[Offer]:
        return [_offer("goodcloud", 16.0), _offer("goodcloud", 24.0)]


class LockedCloud(_Base):
    """Credentials present but rejected by the API."""

    name: ClassVar[str] = "lockedcloud"

    def fetch_offers(self) -> list[Offer]:
        raise AuthError(
            "the API rejected the key api_key=sk-THIS-IS-SECRET",
            provider="lockedcloud",
            hint="check LOCKED_TOKEN",
        )

    def check(self) -> Availability:
        raise AuthError("key rejected by GET /me", provider="lockedcloud")


class BusyCloud(_Base):
    name: ClassVar[str] = "busycloud"

    def fetch_offers(self) -> list[Offer]:
        raise TransientError("HTTP 503 after 5 attempts", provider="busycloud")


class OffCloud(_Base):
    name: ClassVar[str] = "offcloud"

    def availability(self) -> Availability:
        return Availability(False, "no OFF_TOKEN set", ("env:OFF_TOKEN", "file:~/.off"))

    def fetch_offers(self) -> list[Offer]:
        raise AssertionError("a disabled provider must not be asked for offers")


class StaticCloud(_Base):
    """No live price source: does not override fetch_offers."""

    name: ClassVar[str] = "staticcloud"


class OwnBoxes(_Base):
    """Reports its own machines (as local, ssh and sim do): no catalog table needed."""

    name: ClassVar[str] = "ownboxes"

    def offers(self) -> list[Offer]:
        return [_offer("ownboxes", 3.0)]


class BrokenCloud(_Base):
    """Stands for a plugin whose module fails to import (its SDK missing)."""

    name: ClassVar[str] = "brokencloud"

    def __init__(self, *args: object, **kw: object) -> None:
        raise ModuleNotFoundError("No module named 'brokensdk'")


FAKES: dict[str, type[Provider]] = {
    cls.name: cls
    for cls in (GoodCloud, LockedCloud, BusyCloud, OffCloud, StaticCloud, BrokenCloud, OwnBoxes)
}


class FakeRegistry(Registry):
    """Only the fakes, so the tests do not depend on which real plugins are installed."""

    def names(self) -> list[str]:
        return sorted(self._extra)


def fake_app(home: Path) -> App:
    app = App(env={"CLOUDGPU_HOME": str(home)})
    app.__dict__["registry"] = FakeRegistry(app.config, app.paths, app.env, extra=FAKES)
    return app
