"""Startup learned from a real state store, staging, data stalls, spot loss."""

from __future__ import annotations

import pytest

from cloudgpu.paths import Paths
from cloudgpu.planner import StartupHistory
from cloudgpu.planner.overhead import (
    FALLBACK_STARTUP_S,
    spot_extra_hours,
    staging_hours,
    stall_fraction,
)
from cloudgpu.state.store import InstanceRecord, Store


def test_startup_history_is_the_median_of_past_launches(paths: Paths) -> None:
    store = Store.open(paths.state_db)
    try:
        for i, boot in enumerate((100.0, 60.0, 80.0, 1000.0, 70.0)):
            store.add_instance(
                InstanceRecord(
                    id=f"i{i}",
                    job_id="j",
                    provider="aws",
                    state="terminated",
                    created_at=1000.0 + i * 10_000,
                    launched_at=1000.0 + i * 10_000 + boot,
                )
            )
        store.add_instance(
            InstanceRecord(
                id="never", job_id="j", provider="gcp", state="terminated", created_at=5.0
            )
        )
        history = StartupHistory.from_store(store)
    finally:
        store.close()
    assert history.startup_s("aws") == 80.0
    assert history.is_measured("aws") and not history.is_measured("gcp")
    assert history.startup_s("gcp") == FALLBACK_STARTUP_S  # nothing declared, nothing seen
    declared = history.with_defaults({"gcp": 240.0}.get)  # type: ignore[arg-type]
    assert declared.startup_s("gcp") == 240.0 and declared.startup_s("aws") == 80.0


def test_only_the_most_recent_launches_count() -> None:
    recs = [
        InstanceRecord(
            id=str(i),
            job_id="j",
            provider="runpod",
            state="terminated",
            created_at=float(i),
            launched_at=float(i) + (500 if i < 5 else 20),
        )
        for i in range(30)
    ]
    assert StartupHistory.from_instances(recs, last=20).startup_s("runpod") == 20.0


def test_staging_uses_the_slowest_of_source_network_and_disk() -> None:
    # 100 GB at min(10 Gbit/s source, 80% of the network) = 1 GB/s onto NVMe
    assert staging_hours(100e9, 100.0, 4) * 3600 == pytest.approx(100.0)
    # a network disk (0.25 GB/s) is slower than the network
    assert staging_hours(100e9, 100.0, 0) * 3600 == pytest.approx(400.0)
    assert staging_hours(0, 100.0, 0) == 0.0


def test_stall_fraction_follows_the_starvation_model() -> None:
    # REFERENCE s5: ResNet-50 on A100 consumes ~5,300 img/s while CPU JPEG decode delivers
    # ~850: with 8 vCPUs at ~106 img/s each, the GPU waits ~84% of the time.
    assert stall_fraction(5300, 110e3, 1, 8, 8, 106) == pytest.approx(1 - 848 / 5300)
    assert stall_fraction(5300, 110e3, 1, 8, 0, 0) == 0.0  # NVMe alone keeps up
    assert stall_fraction(0, 0, 8, 0, 8, 0) == 0.0


def test_spot_loss_grows_with_run_length_and_rate() -> None:
    assert spot_extra_hours(10, 0.05, 30, 0) == pytest.approx(10 * 0.05 * 0.25)
    assert spot_extra_hours(10, 0.1, 30, 360) > spot_extra_hours(10, 0.05, 30, 360)
