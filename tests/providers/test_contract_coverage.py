"""Every registered provider must have a subclass of the shared contract suite."""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points

import tests.providers as pkg
from cloudgpu.testing import SUBCLASSES


def test_every_registered_provider_has_a_contract_suite() -> None:
    for info in pkgutil.walk_packages(pkg.__path__, prefix="tests.providers."):
        importlib.import_module(info.name)
    covered = {cls.provider_name for cls in SUBCLASSES}
    registered = {ep.name for ep in entry_points(group="cloudgpu.providers")}
    missing = sorted(registered - covered)
    assert not missing, f"providers without a contract test suite: {missing}"
