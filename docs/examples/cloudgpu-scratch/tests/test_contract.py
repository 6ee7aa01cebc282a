"""cloudgpu's shared provider contract suite, run against this provider: the same tests
every built-in provider passes (cloudgpu.testing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.catalog.offer import Offer
from cloudgpu.config import Config
from cloudgpu.paths import default_paths
from cloudgpu.provider import Provider
from cloudgpu.registry import Registry
from cloudgpu.testing import ProviderContract


class TestScratchContract(ProviderContract):
    provider_name = "scratch"

    @pytest.fixture
    def provider(self, tmp_path: Path) -> Provider:
        data = {"providers": {"scratch": {"enabled": True, "slots": 4}}}
        paths = default_paths({"CLOUDGPU_HOME": str(tmp_path)})
        return Registry(Config(data), paths, {}).get("scratch")

    @pytest.fixture
    def offer(self, provider: Provider) -> Offer:
        return provider.offers()[0]
