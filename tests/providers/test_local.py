"""The `local` provider against the shared contract suite, plus what only it does."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloudgpu.builtin.local import LocalProvider
from cloudgpu.catalog.offer import Offer
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, InstanceState, ProviderContext
from cloudgpu.testing import ProviderContract


def make_local(paths: Paths, **config: object) -> LocalProvider:
    return LocalProvider(ProviderContext(config=config, paths=paths, env={}))


class TestLocalContract(ProviderContract):
    provider_name = "local"

    @pytest.fixture
    def provider(self, paths: Paths) -> LocalProvider:
        return make_local(paths)

    @pytest.fixture
    def offer(self, provider: LocalProvider) -> Offer:
        return provider.offers()[0]

    def test_offer_invariants(self, provider: LocalProvider) -> None:
        # Overridden: this machine may have no GPU, and using it costs nothing unless a
        # price is configured; everything else the shared suite asks still holds.
        (o,) = provider.offers()
        assert o.provider == "local" and o.market == "on_demand"
        assert o.price_per_hour == 0 and math.isfinite(o.price_per_hour)
        assert o.gpu_count >= 0 and (o.gpu_count == 0) == (o.gpu == "")
        assert o.vcpus >= 1 and o.memory_gb > 0 and o.observed_at
        assert o.nvme_size_gb > 0


def test_configured_price_and_disable(paths: Paths) -> None:
    assert make_local(paths, price_per_hour=0.5).offers()[0].price_per_hour == 0.5
    av = make_local(paths, enabled=False).availability()
    assert not av.enabled and "disabled" in av.reason


def test_idempotent_create(paths: Paths) -> None:
    p = make_local(paths)
    req = TestLocalContract().request(p.offers()[0])
    a = p.create(req)
    b = p.create(req)
    assert a.id == b.id
    p.terminate(a.id)


def test_terminate_stops_the_instances_processes(paths: Paths) -> None:
    p = make_local(paths)
    inst = p.create(TestLocalContract().request(p.offers()[0]))
    env = {**os.environ, "CLOUDGPU_INSTANCE": inst.id}
    # A job process that ignores SIGTERM and lives in its own session, as the job's would.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
        ],
        env=env,
        start_new_session=True,
    )
    time.sleep(0.3)
    p.terminate(inst.id)
    assert proc.wait(10) == -9
    assert not Path(inst.workdir).exists()
    assert p.describe(inst.id).state == InstanceState.TERMINATED


def test_deadline_ends_the_instance(paths: Paths) -> None:
    now = [1000.0]
    p = LocalProvider(ProviderContext(config={}, paths=paths, env={}, clock=lambda: now[0]))
    req = TestLocalContract().request(p.offers()[0])
    req = type(req)(**{**req.__dict__, "deadline": 1010.0})
    inst = p.create(req)
    assert p.describe(inst.id).state == InstanceState.RUNNING
    now[0] = 1011.0
    assert p.describe(inst.id).state == InstanceState.TERMINATED
    assert p.list_instances({TAG_JOB: req.tags[TAG_JOB]}) == []
