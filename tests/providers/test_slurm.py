"""The slurm provider against a real Slurm (slurmctld + slurmd + munge) on loopback,
reached through a real sshd as its login node (tests/fixtures/slurm.py)."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.slurm import SlurmProvider
from cloudgpu_providers.slurm.commands import decode_comment, encode_comment, gpu_gres
from cloudgpu_providers.slurm.settings import parse

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, ConfigError
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, TAG_OWNER, InstanceState, ProviderContext
from cloudgpu.remote import connect
from cloudgpu.testing import ProviderContract
from tests.fixtures.slurm import SlurmCluster, slurm_cluster
from tests.lifecycle.helpers import TEMPLATES, job_file, main_exit, store, wait_for
from tests.torchrun_job import NO_TORCHRUN, torch_job

__all__ = ["slurm_cluster"]  # the session fixture, imported for pytest


def slurm_config(cluster: SlurmCluster, **extra: Any) -> dict[str, Any]:
    login = cluster.login
    return {
        "host": login.host,
        "port": login.port,
        "user": login.user,
        "key": str(login.key_path),
        "host_key": login.host_key_fingerprint,
        "cluster": "testhpc",
        "price_per_gpu_hour": 0.5,
        # Both "nodes" are this machine: each node's own dir stands in for its local disk.
        "scratch": f"{cluster.dir}/scratch/$SLURMD_NODENAME",
        **extra,
    }


def make(paths: Paths, cluster: SlurmCluster, **extra: Any) -> SlurmProvider:
    return SlurmProvider(
        ProviderContext(config=slurm_config(cluster, **extra), paths=paths, env={})
    )


def offer_of(p: SlurmProvider, instance_type: str) -> Offer:
    return next(o for o in p.offers() if o.instance_type == instance_type)


@pytest.fixture(autouse=True)
def no_jobs_left(slurm_cluster: SlurmCluster) -> Any:
    """Every test leaves the cluster as it found it: no job still pending or running."""
    yield
    left = slurm_cluster.live_jobs()
    for line in left:
        slurm_cluster.run("scancel", line.split("|")[0], check=False)
    assert not left, f"jobs left running: {left}"


class TestSlurmContract(ProviderContract):
    provider_name = "slurm"

    @pytest.fixture
    def provider(self, paths: Paths, slurm_cluster: SlurmCluster) -> SlurmProvider:
        return make(paths, slurm_cluster)

    @pytest.fixture
    def offer(self, provider: SlurmProvider) -> Offer:
        return offer_of(provider, "gpu:l4:1")


def test_offers_from_sinfo(paths: Paths, slurm_cluster: SlurmCluster) -> None:
    p = make(paths, slurm_cluster, price_per_cpu_hour=0.01)
    by_type = {o.instance_type: o for o in p.offers()}
    assert set(by_type) == {"gpu:l4:1", "gpu:l4:2", "cpu:cpu:2"}
    two = by_type["gpu:l4:2"]
    assert (two.gpu, two.gpu_count, two.gpu_memory_gb) == ("L4", 2, 24)
    assert (two.region, two.zone, two.price_per_hour) == ("testhpc", "gpu", 1.0)
    assert two.vcpus == 2 and two.extra["free_nodes"] == 2 and two.extra["whole_node"]
    one = by_type["gpu:l4:1"]
    assert (one.vcpus, one.price_per_hour, one.extra["whole_node"]) == (1, 0.5, False)
    cpu = by_type["cpu:cpu:2"]
    assert cpu.gpu_count == 0 and cpu.price_per_hour == pytest.approx(0.02)
    # Only priced partitions are offered; a configured table restricts to its partitions.
    only = make(paths, slurm_cluster, partitions={"cpu": {"price_per_cpu_hour": 0.03}})
    assert {o.instance_type for o in only.offers()} == {"cpu:cpu:2"}


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"providers\.slurm: unknown key"):
        parse({"host": "x", "partiton": {}})
    with pytest.raises(ConfigError, match="scratch"):
        parse({"host": "x", "scratch": "/tmp/$(rm -rf ~)"})
    with pytest.raises(ConfigError, match="sbatch_args"):
        parse({"host": "x", "sbatch_args": ["--x=1; rm -rf /"]})
    with pytest.raises(ConfigError, match=r"partitions\.gpu\.price_per_gpu_hour"):
        parse({"host": "x", "partitions": {"gpu": {"price_per_gpu_hour": -1}}})
    assert parse({}) is None


def test_comment_and_gres_parsing() -> None:
    fields = {TAG_JOB: "j-1", TAG_OWNER: "me@host", "cloudgpu-instance": "i-a,i-b", "x": "a;b=c"}
    assert decode_comment(encode_comment(fields)) == fields
    assert decode_comment("someone else's comment") is None
    assert gpu_gres("gpu:a100:4(S:0-1),gpu:2,shard:8") == [("a100", 4), ("", 2)]
    assert gpu_gres("(null)") == []


def test_two_node_job_runs_steps_on_each_node_and_cleans_up(
    paths: Paths, slurm_cluster: SlurmCluster
) -> None:
    p = make(paths, slurm_cluster)
    offer = offer_of(p, "gpu:l4:2")
    base = TestSlurmContract().request(offer)
    reqs = [
        type(base)(**{**base.__dict__, "tags": {**base.tags, "cloudgpu-instance": f"i-{r}"}})
        for r in range(2)
    ]
    nodes = p.create_nodes(reqs)
    try:
        running = [TestSlurmContract().wait_running(p, n.id) for n in nodes]
        assert [r.state for r in running] == [InstanceState.RUNNING] * 2
        assert {r.extra["node"] for r in running} == {"n1", "n2"}
        assert [r.tags["cloudgpu-instance"] for r in running] == ["i-0", "i-1"]
        assert all(r.private_address == "127.0.0.1" for r in running)
        for r in running:
            node = r.extra["node"]
            assert (
                r.nvme_mount == f"{slurm_cluster.dir}/scratch/{node}/cloudgpu-{r.extra['job_id']}"
            )
            m = connect(r, known_hosts=paths.data_dir / "known_hosts")
            out: list[bytes] = []
            try:
                rc = m.run(
                    'mkdir -p "$CLOUDGPU_NVME" && echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $X"',
                    env={"X": "it's quoted"},
                    on_stdout=out.append,
                )
                src = paths.data_dir / "payload"
                src.mkdir(exist_ok=True)
                (src / "a.bin").write_bytes(bytes(range(256)) * 64)
                stats = m.put_dir(src, f"{r.nvme_mount}/data")
            finally:
                m.close()
            assert rc == 0 and b"".join(out).decode().split() == [node, "0,1", "it's", "quoted"]
            assert stats.files_sent == 1
            staged = Path(r.nvme_mount) / "data" / "a.bin"
            assert staged.read_bytes() == bytes(range(256)) * 64
        assert {i.id for i in p.list_instances({TAG_JOB: base.tags[TAG_JOB]})} == {
            n.id for n in nodes
        }
    finally:
        p.terminate(nodes[0].id)  # one node's teardown cancels the whole job
    wait_for(lambda: all(p.describe(n.id).state.is_gone for n in nodes), 30, "job cancelled")
    for r in running:
        assert not Path(r.nvme_mount).exists()  # scratch removed on every node


def test_stop_kills_the_step_on_the_node(paths: Paths, slurm_cluster: SlurmCluster) -> None:
    p = make(paths, slurm_cluster)
    inst = p.create(TestSlurmContract().request(offer_of(p, "gpu:l4:1")))
    import threading

    try:
        inst = TestSlurmContract().wait_running(p, inst.id)
        m = connect(inst, known_hosts=paths.data_dir / "known_hosts")
        stop = threading.Event()
        marker = Path(inst.nvme_mount) / "still-running"
        try:
            threading.Timer(1.5, stop.set).start()
            t0 = time.monotonic()
            rc = m.run(
                f'mkdir -p "$CLOUDGPU_NVME"; sleep 30; touch {marker}', stop=stop, timeout=60
            )
        finally:
            m.close()
        assert rc == 143 and time.monotonic() - t0 < 20
        time.sleep(1)
        assert not marker.exists()
    finally:
        p.terminate(inst.id)


def test_never_runnable_and_busy_fail_over(paths: Paths, slurm_cluster: SlurmCluster) -> None:
    p = make(paths, slurm_cluster, when_busy="fail")
    offer = offer_of(p, "gpu:l4:2")
    # Three whole GPU nodes from a two-node partition: Slurm queues it, forever.
    reqs = [TestSlurmContract().request(offer) for _ in range(3)]
    with pytest.raises(CapacityError, match=r"would never start \(PartitionNodeLimit\)"):
        p.create_nodes(reqs)
    # Three GPUs on a two-GPU node: sbatch refuses it outright.
    three = replace(offer_of(p, "gpu:l4:1"), gpu_count=3)
    with pytest.raises(CapacityError, match="Requested node configuration is not available"):
        p.create(TestSlurmContract().request(three))
    # Both GPU nodes taken by someone else's job: busy, and when_busy = "fail".
    other = slurm_cluster.run(
        "sbatch", "--parsable", "-p", "gpu", "-N2", "--exclusive", "-o", "/dev/null",
        "--wrap", "sleep 120",
    ).strip()  # fmt: skip
    try:
        wait_for(lambda: f"{other}|RUNNING" in "\n".join(slurm_cluster.jobs()), 20, "other job")
        with pytest.raises(CapacityError, match="no free node now"):
            p.create(TestSlurmContract().request(offer))
        queued = make(paths, slurm_cluster).create(TestSlurmContract().request(offer))
        assert queued.state == InstanceState.PENDING and queued.ssh is None
        make(paths, slurm_cluster).terminate(queued.id)
    finally:
        slurm_cluster.run("scancel", other)
    assert not [j for j in slurm_cluster.live_jobs() if "cloudgpu;" in j]


def test_create_is_idempotent_and_orphans_are_found(
    paths: Paths, slurm_cluster: SlurmCluster
) -> None:
    p = make(paths, slurm_cluster)
    req = TestSlurmContract().request(offer_of(p, "gpu:l4:1"))
    first = p.create(req)
    try:
        assert p.create(req).id == first.id  # same token: the same Slurm job
        # A new process (no memory of the job) finds it by its comment tag.
        found = make(paths, slurm_cluster).list_instances({TAG_OWNER: "contract-test"})
        assert [i.id for i in found] == [first.id]
        line = next(j for j in slurm_cluster.jobs() if j.startswith(first.extra["job_id"] + "|"))
        assert line.split("|")[2] == req.name and "cloudgpu-job=" in line
    finally:
        p.terminate(first.id)


# -- launch end to end -------------------------------------------------------------------


def write_launch_config(home: Path, cluster: SlurmCluster) -> None:
    cfg = home / "config" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    table = slurm_config(cluster)
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
    cfg.write_text(f"[launch]\nssh_timeout = 20\n[providers.local]\nenabled = false\n"
                   f"[providers.slurm]\n{body}\n")  # fmt: skip


@pytest.mark.slow
def test_launch_on_slurm_stages_runs_collects_and_cancels(
    tmp_path: Path, cloudgpu_home: Path, slurm_cluster: SlurmCluster
) -> None:
    write_launch_config(cloudgpu_home, slurm_cluster)
    shutil.copytree(TEMPLATES / "quickstart-data", tmp_path / "quickstart-data")
    text = (TEMPLATES / "quickstart.yaml").read_text()
    text = text.replace("providers: [local]", "providers: [slurm]").replace(
        "gpu: none", "gpu: L4:1"
    )
    job = job_file(tmp_path, text, "slurm.yaml")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert "slurm gpu:l4:1" in err
    assert json.loads((tmp_path / "quickstart-results" / "summary.json").read_text())
    (rec,) = store(cloudgpu_home).instances(store(cloudgpu_home).jobs()[-1].id)
    assert rec.state == "terminated" and rec.provider_id.startswith("slurm-")
    assert not [j for j in slurm_cluster.live_jobs() if "cloudgpu;" in j]
    assert not list(slurm_cluster.scratch("n1").glob("cloudgpu-*"))
    assert not list(slurm_cluster.scratch("n2").glob("cloudgpu-*"))


@pytest.mark.slow
@pytest.mark.skipif(bool(NO_TORCHRUN), reason=NO_TORCHRUN)
def test_torchrun_across_two_slurm_nodes(
    tmp_path: Path, cloudgpu_home: Path, slurm_cluster: SlurmCluster
) -> None:
    """Real torchrun (gloo) on both nodes of one Slurm job, each node's run an srun step,
    the all_reduce's sum checked, outputs from rank 0, the job cancelled after."""
    write_launch_config(cloudgpu_home, slurm_cluster)
    job = torch_job(tmp_path, 2, resources='{gpu: "L4:1", providers: [slurm]}', name="ddp-slurm")
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert "2 x slurm gpu:l4:1" in err
    result = json.loads((tmp_path / "results" / "result.json").read_text())
    assert result == {"world": 2, "sum": 3.0, "nodes": "127.0.0.1,127.0.0.1"}
    for rank in range(2):
        assert f"[node {rank}] rank {rank}/2 node {rank} sum 3" in out
    assert not [j for j in slurm_cluster.live_jobs() if "cloudgpu;" in j]
    for node in ("n1", "n2"):
        assert not list(slurm_cluster.scratch(node).glob("cloudgpu-*"))
