"""RunPodProvider.preemption_notice(): RunPod has no interruption notice, only a host's
announced maintenance window (machine.maintenanceStart), read from outside; nothing is
installed in the pod (no cloudgpu watcher: there is no notice to watch)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cloudgpu_providers.runpod import RunPodProvider

from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from cloudgpu.testing import ProviderContract
from tests.fixtures.runpod.server import FakeRunPod


@pytest.fixture
def fake() -> Iterator[FakeRunPod]:
    server = FakeRunPod().start()
    yield server
    server.stop()


@pytest.fixture
def provider(fake: FakeRunPod, paths: Paths) -> RunPodProvider:
    env = {"RUNPOD_API_KEY": fake.api_key, "RUNPOD_API_BASE_URL": fake.base_url}
    return RunPodProvider(ProviderContext(config={"poll_s": 0}, paths=paths, env=env))


@pytest.fixture
def pod_id(provider: RunPodProvider) -> str:
    offer = next(o for o in provider.fetch_offers() if o.gpu == "RTX4090")
    return provider.create(ProviderContract().request(offer)).id


def test_provider_reads_a_near_maintenance_window(
    provider: RunPodProvider, fake: FakeRunPod, pod_id: str
) -> None:
    inst = provider.describe(pod_id)
    assert provider.preemption_notice(inst) is None
    assert provider.notice_watcher(inst) is None
    soon = time.time() + 120
    fake.pods[pod_id]["machine"]["maintenanceStart"] = int(soon * 1000)
    assert provider.preemption_notice(inst) == pytest.approx(soon, abs=1)
    fake.pods[pod_id]["machine"]["maintenanceStart"] = "2099-01-01T00:00:00Z"
    assert provider.preemption_notice(inst) is None
