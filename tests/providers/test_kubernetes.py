"""The kubernetes provider through the official client against the loopback API server
(tests/fixtures/kubernetes): offers from nodes, pods and indexed jobs, exec over the
websocket, tar transfers, scheduling failures, labels, deletion."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.kubernetes import KubernetesProvider
from cloudgpu_providers.kubernetes.settings import parse

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import AuthError, CapacityError, ConfigError
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, TAG_OWNER, InstanceState, ProviderContext
from cloudgpu.testing import ProviderContract
from tests.fixtures.kubernetes.apiserver import FakeKubeAPI
from tests.fixtures.kubernetes.cluster import can_run
from tests.lifecycle.helpers import TEMPLATES, job_file, main_exit, store, wait_for
from tests.providers.lifecycle_kit import write_config

pytestmark = pytest.mark.skipif(can_run() is not None, reason=str(can_run()))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI(tmp_path / "kubelet")
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def make(paths: Paths, api: FakeKubeAPI, tmp_path: Path, **extra: Any) -> KubernetesProvider:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    config = {"enabled": True, "kubeconfig": str(kubeconfig), "price_per_gpu_hour": 0.8, **extra}
    return KubernetesProvider(ProviderContext(config=config, paths=paths, env={}))


def offer_of(p: KubernetesProvider, instance_type: str) -> Offer:
    return next(o for o in p.offers() if o.instance_type == instance_type)


class TestKubernetesContract(ProviderContract):
    provider_name = "kubernetes"

    @pytest.fixture
    def provider(self, paths: Paths, api: FakeKubeAPI, tmp_path: Path) -> KubernetesProvider:
        return make(paths, api, tmp_path)

    @pytest.fixture
    def offer(self, provider: KubernetesProvider) -> Offer:
        return offer_of(provider, "g6.12xlarge:gpu:1")


def test_offers_from_node_allocatable_and_labels(
    paths: Paths, api: FakeKubeAPI, tmp_path: Path
) -> None:
    p = make(paths, api, tmp_path, price_per_cpu_hour=0.01)
    by_type = {o.instance_type: o for o in p.offers()}
    assert set(by_type) == {"g6.12xlarge:gpu:1", "g6.12xlarge:gpu:2", "g6.12xlarge:gpu:4",
                            "m6i.2xlarge:cpu"}  # fmt: skip
    four = by_type["g6.12xlarge:gpu:4"]
    assert (four.gpu, four.gpu_count, four.region, four.zone) == (
        "L4",
        4,
        "us-east-1",
        "us-east-1a",
    )
    assert four.gpu_memory_gb == pytest.approx(22.5, abs=0.1)  # GFD reports MiB
    assert four.vcpus == 47 and four.price_per_hour == pytest.approx(3.2)
    assert four.extra["nodes"] == 2 and four.extra["node_selector"] == {
        "node.kubernetes.io/instance-type": "g6.12xlarge",
        "nvidia.com/gpu.product": "NVIDIA-L4",
    }
    assert by_type["m6i.2xlarge:cpu"].price_per_hour == pytest.approx(0.07)
    # Without a configured price: the instance type's per-GPU price in the catalog.
    cataloged = {
        o.instance_type: o for o in make(paths, api, tmp_path, price_per_gpu_hour=None).offers()
    }
    one = cataloged["g6.12xlarge:gpu:1"]
    assert one.price_source == "catalog:g6.12xlarge" and one.price_per_hour > 0
    assert cataloged["g6.12xlarge:gpu:4"].price_per_hour == pytest.approx(4 * one.price_per_hour)


def test_config(tmp_path: Path) -> None:
    assert parse({}, {}, tmp_path) is None  # opt-in: a kubeconfig alone enables nothing
    s = parse({"enabled": True}, {"KUBECONFIG": "/a/one:/b/two"}, tmp_path)
    assert s is not None and s.kubeconfig == "/a/one"
    with pytest.raises(ConfigError, match=r"providers\.kubernetes: unknown key"):
        parse({"enabled": True, "namepsace": "x"}, {}, tmp_path)
    with pytest.raises(ConfigError, match="namespace"):
        parse({"enabled": True, "namespace": "Bad_NS"}, {}, tmp_path)


def test_bad_token_is_an_auth_error(paths: Paths, api: FakeKubeAPI, tmp_path: Path) -> None:
    p = make(paths, api, tmp_path)
    api.token = "rotated"
    with pytest.raises(AuthError, match="Unauthorized"):
        p.offers()


def test_pod_exec_transfers_and_stop(paths: Paths, api: FakeKubeAPI, tmp_path: Path) -> None:
    p = make(paths, api, tmp_path)
    req = TestKubernetesContract().request(offer_of(p, "g6.12xlarge:gpu:2"))
    inst = p.create(req)
    try:
        running = TestKubernetesContract().wait_running(p, inst.id)
        assert running.private_address.startswith("127.0.0.")
        pod = api.cluster.get("pods", "ml", running.extra["pod"])
        assert pod is not None
        assert pod["metadata"]["labels"]["cloudgpu-owner"] == "contract-test"
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/gpu": "2"}
        assert pod["spec"]["activeDeadlineSeconds"] > 3000
        m = p.open_machine(running)
        out: list[bytes] = []
        rc = m.run('echo "$CLOUDGPU_NVME $X" > /nvme/probe; cat /nvme/probe; exit 3',
                   env={"X": "it's"}, on_stdout=out.append)  # fmt: skip
        assert rc == 3 and b"".join(out) == b"/nvme it's\n"
        src = tmp_path / "src"
        (src / "d").mkdir(parents=True)
        (src / "d" / "big.bin").write_bytes(bytes(range(256)) * 8192)
        (src / "small.txt").write_text("x")
        assert m.put_dir(src, "/nvme/data").files_sent == 2
        back = tmp_path / "back"
        assert m.get_dir("/nvme/data", back).bytes_sent == 256 * 8192 + 1
        assert (back / "d" / "big.bin").read_bytes() == (src / "d" / "big.bin").read_bytes()
        # The pod's /nvme is its own emptyDir, not this machine's.
        assert not Path("/nvme/probe").exists()
        stop = threading.Event()
        threading.Timer(1.0, stop.set).start()
        t0 = time.monotonic()
        assert m.run("sleep 60 & wait", stop=stop, timeout=90) == 143
        # Killed by the group kill under the pod's sh (dash), not given up on after the
        # grace (that path returns 143 too, but only after KILL_GRACE_S + 10 s).
        assert time.monotonic() - t0 < 10
    finally:
        p.terminate(inst.id)
    wait_for(lambda: p.describe(inst.id).state.is_gone, 20, "pod deleted")


def test_v4_server_without_stdin_close(paths: Paths, tmp_path: Path) -> None:
    fake = FakeKubeAPI(tmp_path / "kubelet", v5=False)
    fake.start()
    try:
        p = make(paths, fake, tmp_path)
        inst = p.create(TestKubernetesContract().request(offer_of(p, "g6.12xlarge:gpu:1")))
        running = TestKubernetesContract().wait_running(p, inst.id)
        m = p.open_machine(running)
        f = tmp_path / "one.txt"
        f.write_text("over v4")
        m.put_file(f, "/nvme/in/one.txt")  # tar stops at the archive's end: no EOF needed
        m.get_file("/nvme/in/one.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == "over v4"
        p.terminate(inst.id)
    finally:
        fake.stop()


def test_multi_node_indexed_job_with_headless_service(
    paths: Paths, api: FakeKubeAPI, tmp_path: Path
) -> None:
    p = make(paths, api, tmp_path)
    base = TestKubernetesContract().request(offer_of(p, "g6.12xlarge:gpu:4"))
    reqs = [replace(base, tags={**base.tags, TAG_INSTANCE: f"i-{r}"}) for r in range(2)]
    nodes = p.create_nodes(reqs)
    try:
        running = [TestKubernetesContract().wait_running(p, n.id) for n in nodes]
        assert [r.id.rsplit("/", 1)[1] for r in running] == ["0", "1"]
        assert [r.tags[TAG_INSTANCE] for r in running] == ["i-0", "i-1"]
        assert {r.extra["node"] for r in running} == {"gpu-node-a", "gpu-node-b"}
        job = api.cluster.get("jobs", "ml", nodes[0].id.split("/")[2])
        assert job is not None and job["spec"]["completionMode"] == "Indexed"
        svc = api.cluster.get("services", "ml", job["metadata"]["name"])
        assert svc is not None and svc["spec"]["clusterIP"] == "None"
        out: list[bytes] = []
        p.open_machine(running[1]).run("echo $JOB_COMPLETION_INDEX $HOSTNAME", on_stdout=out.append)
        assert b"".join(out).decode().split() == ["1", f"{job['metadata']['name']}-1"]
        found = p.list_instances({TAG_JOB: base.tags[TAG_JOB]})
        assert sorted(i.id for i in found) == sorted(n.id for n in nodes)
    finally:
        p.terminate(nodes[0].id)
    wait_for(lambda: not api.cluster.list("pods", "ml"), 20, "the job's pods deleted")
    assert all(p.describe(n.id).state.is_gone for n in nodes)
    assert api.cluster.list("services", "ml") == [] and api.cluster.list("jobs", "ml") == []


def test_unschedulable_is_capacity_and_leaves_nothing(
    paths: Paths, api: FakeKubeAPI, tmp_path: Path
) -> None:
    p = make(paths, api, tmp_path)
    offer = offer_of(p, "g6.12xlarge:gpu:4")
    # Three whole GPU nodes in a cluster of two: the third pod cannot be placed.
    reqs = [TestKubernetesContract().request(offer) for _ in range(3)]
    with pytest.raises(CapacityError, match=r"Insufficient nvidia\.com/gpu"):
        p.create_nodes(reqs)
    wait_for(lambda: not api.cluster.list("pods", "ml"), 20, "partial job removed")
    assert api.cluster.list("jobs", "ml") == [] and api.cluster.list("services", "ml") == []
    # A single pod asking more GPUs than any node has.
    with pytest.raises(CapacityError, match="0/3 nodes are available"):
        p.create(TestKubernetesContract().request(replace(offer, gpu_count=8)))
    wait_for(lambda: not api.cluster.list("pods", "ml"), 20, "pod removed")


def test_create_is_idempotent_and_orphans_are_found_by_label(
    paths: Paths, api: FakeKubeAPI, tmp_path: Path
) -> None:
    p = make(paths, api, tmp_path)
    req = TestKubernetesContract().request(offer_of(p, "g6.12xlarge:gpu:1"))
    first = p.create(req)
    assert p.create(req).id == first.id  # 409 AlreadyExists with our token: the same pod
    fresh = make(paths, api, tmp_path)  # a later process knows nothing of it
    assert [i.id for i in fresh.list_instances({TAG_OWNER: "contract-test"})] == [first.id]
    other = replace(req, idempotency_token="another")
    with pytest.raises(Exception, match="exists already"):
        p.create(other)
    fresh.terminate(first.id)
    wait_for(lambda: p.describe(first.id).state.is_gone, 20, "pod deleted")


def test_evicted_pod_is_preempted(paths: Paths, api: FakeKubeAPI, tmp_path: Path) -> None:
    p = make(paths, api, tmp_path)
    inst = p.create(TestKubernetesContract().request(offer_of(p, "g6.12xlarge:gpu:1")))
    running = TestKubernetesContract().wait_running(p, inst.id)
    pod = api.cluster.get("pods", "ml", running.extra["pod"])
    assert pod is not None
    api.cluster.evict(pod)
    assert p.describe(inst.id).state == InstanceState.PREEMPTED
    p.terminate(inst.id)


# -- launch end to end -------------------------------------------------------------------


@pytest.mark.slow
def configure_launch(cloudgpu_home: Path, api: FakeKubeAPI, tmp_path: Path) -> None:
    """config.toml for `cloudgpu launch` on the fake cluster alone, as a user writes it."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    write_config(
        cloudgpu_home,
        "[providers.local]\nenabled = false\n[providers.kubernetes]\nenabled = true\n"
        f"kubeconfig = {json.dumps(str(kubeconfig))}\nprice_per_gpu_hour = 0.8\n",
    )


def test_launch_on_kubernetes(tmp_path: Path, cloudgpu_home: Path, api: FakeKubeAPI) -> None:
    configure_launch(cloudgpu_home, api, tmp_path)
    shutil.copytree(TEMPLATES / "quickstart-data", tmp_path / "quickstart-data")
    text = (TEMPLATES / "quickstart.yaml").read_text()
    text = text.replace("providers: [local]", "providers: [kubernetes]")
    job = job_file(tmp_path, text.replace("gpu: none", "gpu: L4:1"), "k8s.yaml")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert json.loads((tmp_path / "quickstart-results" / "summary.json").read_text())
    (rec,) = store(cloudgpu_home).instances(store(cloudgpu_home).jobs()[-1].id)
    assert rec.state == "terminated" and rec.provider_id.startswith("pod/ml/"), err
    assert api.cluster.list("pods", "ml") == []
