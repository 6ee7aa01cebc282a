"""`cloudgpu launch` on GCP end to end: the catalog is refreshed from the loopback
Compute/Billing fake, the provider creates the VM and its firewall rule through the real
google-cloud-compute SDK (REST transport), and the job runs over SSH on a real loopback
sshd standing in for the VM; then the VM and the rule are deleted.

No test-only branch in the provider: it is configured as a user would (``endpoint_url``
and ``anonymous`` as for an emulator, ``ssh_port`` as for an image whose sshd listens
elsewhere, ``ssh_user``, ``nvme_mount``); the fake plays Google's network and guest agent:
it reports the sshd's address (127.0.0.1) as the VM's ``natIP`` and puts the ``ssh-keys``
metadata into the sshd's authorized_keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.paths import default_paths
from cloudgpu.provider import TAG_JOB, TAG_OWNER, CreateRequest, InstanceState
from tests.fixtures.gcp.metadata import GceMetadata
from tests.fixtures.gcp.server import FakeGCP
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, store
from tests.providers.gcp_kit import make_provider
from tests.providers.lifecycle_kit import (
    RESUMABLE_RUN,
    announce_when_progressed,
    launch_succeeds,
    machines_on,
    resumed_after_inside_notice,
    write_config,
)
from tests.remote.sshd import SSHDServer

pytestmark = pytest.mark.slow

JOB = """\
name: gcp-life
resources:
  gpu: {gpu}
  spot: false
  providers: [gcp]
data:
  - {{src: ./dataset, dst: /nvme/data}}
run: |
  echo "ran in $CLOUDGPU_INSTANCE"
  mkdir -p "$CLOUDGPU_NVME/out"
  cat "$CLOUDGPU_NVME"/data/*.txt | wc -l > "$CLOUDGPU_NVME/out/lines.txt"
  echo "counted $(cat "$CLOUDGPU_NVME/out/lines.txt") lines"
outputs:
  - {{src: /nvme/out, dst: ./results}}
limits:
  max_runtime: 5m
  max_cost: 5
"""
LINES = sum(range(1, 6))  # the dataset below: part-i has i lines


@pytest.fixture
def fake(sshd: SSHDServer) -> Iterator[FakeGCP]:
    # GCP reports no SSH port (the provider's ssh_port setting says where sshd listens).
    with machines_on(FakeGCP(), sshd, report_port=False) as server:
        yield server


@pytest.fixture
def configured(
    fake: FakeGCP, sshd: SSHDServer, scratch: Path, cloudgpu_home: Path, tmp_path: Path
) -> Path:
    """config.toml as a user pointing cloudgpu at an emulator writes it (``scratch``, the
    shared fixture, is the VM's NVMe mount), the catalog refreshed from the fake (its
    offers are what the plan picks from), and a dataset next to the job file."""
    write_config(
        cloudgpu_home,
        f'[providers.gcp]\nproject = "{fake.project}"\nanonymous = true\n'
        f'endpoint_url = "{fake.endpoint}"\nssh_cidr = "127.0.0.1/32"\n'
        f'ssh_port = {sshd.port}\nssh_user = "{sshd.user}"\nnvme_mount = "{scratch}"\n'
        "poll_s = 0\nbackoff_s = 0\n[launch]\nssh_timeout = 30\n",
    )
    code, _, err = main_exit(["catalog", "refresh", "--provider", "gcp"])
    assert code == 0, err
    data = tmp_path / "dataset"
    data.mkdir()
    for i in range(1, 6):
        (data / f"part-{i}.txt").write_text(f"record {i}\n" * i)
    return tmp_path


def deleted(fake: FakeGCP, what: str) -> list[str]:
    return [p.rsplit("/", 1)[-1] for m, p in fake.requests if m == "DELETE" and f"/{what}/" in p]


def test_launch_runs_on_a_gce_vm_and_deletes_it_and_its_rule(
    configured: Path, fake: FakeGCP, sshd: SSHDServer, scratch: Path, cloudgpu_home: Path
) -> None:
    job = job_file(configured, JOB.format(gpu="L4"))
    rec, inst, out = launch_succeeds(job, cloudgpu_home, "gcp")
    assert "ran in us-central1-c/" in out and f"counted {LINES} lines" in out
    assert (configured / "results" / "lines.txt").read_text().strip() == str(LINES)
    assert (scratch / "data" / "part-5.txt").is_file()  # /nvme is the nvme_mount setting
    assert inst.instance_type == "g2-standard-8"
    name = inst.provider_id.rsplit("/", 1)[-1]
    (rule,) = fake.firewall_bodies
    assert rule["name"] == f"{name}-ssh" and rule["targetTags"] == [name]
    assert rule["sourceRanges"] == ["127.0.0.1/32"]
    assert rule["allowed"] == [{"IPProtocol": "tcp", "ports": [str(sshd.port)]}]
    assert deleted(fake, "instances") == [name] and deleted(fake, "firewalls") == [f"{name}-ssh"]
    assert fake.instances == {} and fake.firewalls == {}  # deleted and verified gone
    (spend,) = store(cloudgpu_home).spend(job_id=rec.id)
    assert spend.provider == "gcp" and spend.instance_type == "g2-standard-8"
    assert spend.price_per_hour > 0 and spend.cost > 0 and spend.billed_seconds >= 60


def test_launch_as_subprocess(configured: Path, fake: FakeGCP, cloudgpu_home: Path) -> None:
    job = job_file(configured, JOB.format(gpu="L4"))
    res = cli_proc(["launch", str(job), "--yes"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    assert f"counted {LINES} lines" in res.stdout
    assert (configured / "results" / "lines.txt").read_text().strip() == str(LINES)
    assert fake.instances == {} and fake.firewalls == {}


def test_exhausted_zone_fails_over_to_the_next_offer(
    configured: Path, fake: FakeGCP, cloudgpu_home: Path
) -> None:
    # 24GB+ fits the L4 (g2-standard-8, us-central1-c, cheapest) and the A100
    # (a2-highgpu-1g, us-central1-a); the L4's zone has no capacity.
    fake.exhausted_zones = {"us-central1-c"}
    job = job_file(configured, JOB.format(gpu="24GB+"))
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert "ran in us-central1-a/" in out
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in out + err
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "succeeded"
    insts = store(cloudgpu_home).instances(rec.id)
    assert [(i.instance_type, i.state) for i in insts] == [
        ("g2-standard-8", "terminated"),  # the attempt GCP refused
        ("a2-highgpu-1g", "terminated"),
    ]
    # Only the VM that ran is billed.
    assert [s.instance_type for s in store(cloudgpu_home).spend(job_id=rec.id)] == ["a2-highgpu-1g"]
    inserts = [p for m, p in fake.requests if m == "POST" and p.endswith("/instances")]
    assert [p.split("/zones/")[1].split("/")[0] for p in inserts] == [
        "us-central1-c",
        "us-central1-a",
    ]
    # The failed attempt's firewall rule went with it: nothing is left.
    assert len(fake.firewall_bodies) == 2
    assert fake.instances == {} and fake.firewalls == {}


def test_down_orphans_removes_our_left_over_instance_only(
    configured: Path, fake: FakeGCP, cloudgpu_home: Path
) -> None:
    """As if a client crashed right after create: VMs of jobs the store never recorded.
    Ours (owner tag matches) is deleted with its rule; another owner's is kept."""
    provider = make_provider(fake, default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}))
    offer = next(o for o in provider.fetch_offers() if o.instance_type == "a2-highgpu-1g")
    mine, theirs = (
        provider.create(CreateRequest(offer=offer, name=job, tags={TAG_JOB: job, TAG_OWNER: who}))
        for job, who in (
            ("crashed-1", store(cloudgpu_home).owner_id()),
            ("crashed-2", "someone@elsewhere"),
        )
    )
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    assert mine.id in res.stdout and "crashed-1" in res.stdout
    assert theirs.id not in res.stdout
    assert provider.describe(mine.id).state == InstanceState.TERMINATED
    assert list(fake.instances) == [("us-central1-a", "crashed-2")]
    assert list(fake.firewalls) == ["crashed-2-ssh"]
    provider.terminate(theirs.id)


def test_bad_ssh_port_is_one_line(configured: Path, cloudgpu_home: Path) -> None:
    config = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).config_file
    text = config.read_text()
    config.write_text(text.replace("ssh_port = ", 'ssh_port = "ssh" #'))
    code, _, err = main_exit(["launch", str(job_file(configured, JOB.format(gpu="L4"))), "--yes"])
    assert code != 0 and "Traceback" not in err
    assert "providers.gcp.ssh_port: expected a port number" in err


def test_a_metadata_preemption_read_over_ssh_resumes_on_another_offer(
    configured: Path, fake: FakeGCP, scratch: Path, cloudgpu_home: Path
) -> None:
    """The Compute API still shows the Spot VM RUNNING; its metadata server says
    instance/preempted = TRUE: the watcher's hanging GET returns at once, the lifecycle
    reads the notice over SSH, flushes the checkpoint and resumes on the next offer."""
    with GceMetadata() as metadata:
        metadata.one_shot = True  # the next VM's own metadata server says FALSE
        config = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).config_file
        config.write_text(
            config.read_text().replace(
                "poll_s = 0\n", f'poll_s = 0\nmetadata_host = "{metadata.host}"\n', 1
            )
        )
        job = job_file(
            configured,
            "name: gcp-notice\nresources:\n  gpu: L4\n  spot: auto\n  providers: [gcp]\n"
            + RESUMABLE_RUN,
        )
        with announce_when_progressed(scratch, lambda: metadata.set("preempted", "TRUE")):
            code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    resumed_after_inside_notice(out, err)
    (rec,) = store(cloudgpu_home).jobs()
    insts = store(cloudgpu_home).instances(rec.id)
    assert [(i.market, i.state) for i in insts] == [
        ("spot", "preempted"),
        ("on_demand", "terminated"),
    ]


def test_two_nodes_in_one_compact_group_then_the_group_goes(
    configured: Path, fake: FakeGCP, cloudgpu_home: Path
) -> None:
    job = job_file(
        configured,
        """\
name: gcp-two
num_nodes: 2
resources: {gpu: L4, spot: false, providers: [gcp]}
run: echo "rank $NODE_RANK of $NNODES master $MASTER_ADDR nodes $CLOUDGPU_NODE_IPS"
limits: {max_runtime: 5m}
""",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    for rank in (0, 1):  # rank 0's internal address is the rendezvous
        assert (
            f"[node {rank}] rank {rank} of 2 master 10.128.0.7 nodes 10.128.0.7,10.128.0.8" in out
        )
    policies = [p for m, p in fake.requests if m == "POST" and "/resourcePolicies" in p]
    assert len(policies) == 1 and fake.policies == {}  # made for the job, gone after it
    assert deleted(fake, "resourcePolicies") and fake.firewalls == {} and fake.instances == {}
    names = {r["name"] for r in fake.firewall_bodies}
    assert len([n for n in names if n.endswith("-nodes")]) == 1
