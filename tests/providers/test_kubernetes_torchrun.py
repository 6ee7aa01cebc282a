"""A 2-node job on Kubernetes through `cloudgpu launch`: an indexed Job of two pods (the
loopback API server's kubelet runs them as real process trees, pod IPs 127.0.0.x), the
code sent as a tar stream over exec, real torchrun (gloo) on both pods with rank 0's pod
IP as the rendezvous, the all_reduce's sum checked, rank 0's outputs back, all deleted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.kubernetes.apiserver import FakeKubeAPI
from tests.fixtures.kubernetes.cluster import can_run
from tests.lifecycle.helpers import main_exit, status_json
from tests.providers.test_kubernetes import api, configure_launch
from tests.torchrun_job import HAS_TORCH, NO_TORCH, torch_job

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(can_run() is not None, reason=str(can_run())),
    pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH),
]
__all__ = ["api"]  # the fixture, imported for pytest


def test_torchrun_across_two_pods_of_an_indexed_job(
    tmp_path: Path, cloudgpu_home: Path, api: FakeKubeAPI
) -> None:
    configure_launch(cloudgpu_home, api, tmp_path)
    job = torch_job(tmp_path, 2, resources='{gpu: "L4:1", providers: [kubernetes]}', name="ddp-k8s")
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    result = json.loads((tmp_path / "results" / "result.json").read_text())
    assert result["world"] == 2 and result["sum"] == 3.0
    ips = result["nodes"].split(",")
    assert len(set(ips)) == 2 and all(ip.startswith("127.0.0.") for ip in ips)  # pod IPs
    for rank in range(2):
        assert f"[node {rank}] rank {rank}/2 node {rank} sum 3" in out
    (row,) = status_json(cloudgpu_home)
    assert row["state"] == "succeeded"
    assert api.cluster.list("pods", "ml") == [] and api.cluster.list("jobs", "ml") == []
    assert api.cluster.list("services", "ml") == []
