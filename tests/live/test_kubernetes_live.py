"""Live Kubernetes test: a pod on a real cluster (kind, k3s, minikube, a cloud's),
created, exec'd into, files moved both ways as tar streams, deleted and proven gone.

Runs only with ``CLOUDGPU_LIVE=1`` and a kubeconfig ($KUBECONFIG or ~/.kube/config);
skipped everywhere else, CI included. Works on a cluster without GPUs: the offer is the
first node's CPUs (priced at a nominal $/CPU-hour here, nothing is billed by cloudgpu).
``CLOUDGPU_LIVE_K8S_IMAGE`` overrides the image (default busybox: sh and tar only).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cloudgpu_providers.kubernetes import KubernetesProvider

from cloudgpu.paths import Paths
from cloudgpu.provider import InstanceState, ProviderContext
from tests.live.live_kit import ENV, job_name, live_marks, live_request, torn_down


def _kubeconfig() -> str:
    first = (ENV.get("KUBECONFIG") or "").split(":")[0]
    return first or str(Path(ENV.get("HOME", "/root"), ".kube", "config"))


pytestmark = live_marks(
    "live Kubernetes test: needs a kubeconfig", lambda: os.path.isfile(_kubeconfig())
)


def test_pod_round_trip_on_a_real_cluster(paths: Paths, tmp_path: Path) -> None:
    config = {
        "enabled": True,
        "kubeconfig": _kubeconfig(),
        "price_per_cpu_hour": 0.01,
        "price_per_gpu_hour": 1.0,
        "image": ENV.get("CLOUDGPU_LIVE_K8S_IMAGE", "busybox:1.36"),
    }
    provider = KubernetesProvider(ProviderContext(config=config, paths=paths, env=ENV))
    assert provider.check().enabled
    offers = sorted(provider.offers(), key=lambda o: o.price_per_hour)
    assert offers, "the cluster offers no Ready node"
    job = job_name()
    inst = provider.create(live_request(offers[0], job, disk_gb=1))
    with torn_down(provider, inst, job):
        for _ in range(300):  # an image pull can take minutes
            running = provider.describe(inst.id)
            if running.state != InstanceState.PENDING:
                break
            time.sleep(1)
        assert running.state == InstanceState.RUNNING
        m = provider.open_machine(running)
        out: list[bytes] = []
        assert m.run("echo $CLOUDGPU_NVME; uname -s", on_stdout=out.append) == 0
        assert b"".join(out).split() == [b"/nvme", b"Linux"]
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "f.txt").write_text("live")
        m.put_dir(tmp_path / "src", "/nvme/in")
        m.get_dir("/nvme/in", tmp_path / "back")
        assert (tmp_path / "back" / "f.txt").read_text() == "live"
