"""`cloudgpu launch` on Azure end to end: the plan picks an Azure offer from the bundled
catalog, the provider builds the job's resource group through the fake ARM (loopback
HTTPS), and the job runs over SSH on a real loopback sshd standing in for the VM.

No test-only branch: the credential comes from the real chain (an Azure CLI login: a
profile in AZURE_CONFIG_DIR and an ``az`` on PATH that prints a token, as the real CLI
does for AzureCliCredential); the fake gives the VM's public IP as 127.0.0.1 and writes
the VM's SSH key into the sshd's authorized_keys, as Azure's provisioning agent does; the
sshd's port reaches the provider through its ``ssh_port`` setting.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloudgpu_providers.azure import AzureProvider

from cloudgpu.paths import default_paths
from cloudgpu.provider import TAG_JOB, TAG_OWNER, CreateRequest, ProviderContext
from tests.fixtures.azure.fake_arm import FakeArm, provider_config
from tests.fixtures.azure.imds import AzureImds
from tests.fixtures.azure.support import TOKEN, StaticToken, az_login
from tests.lifecycle.helpers import job_file, main_exit, store, wait_for
from tests.providers.lifecycle_kit import (
    RESUMABLE_RUN,
    announce_when_progressed,
    launch_fails_cleanly,
    launch_in_subprocess,
    launch_job,
    launch_succeeds,
    resumed_after_inside_notice,
    write_config,
)
from tests.providers.test_azure import make_offer
from tests.remote.sshd import SSHDServer

pytestmark = pytest.mark.slow

JOB = launch_job("az-life", "T4", "azure", probe="")


@pytest.fixture
def arm(tmp_path: Path, sshd: SSHDServer) -> Iterator[FakeArm]:
    with FakeArm(tmp_path) as fake:
        fake.state.fixed_public_ip = "127.0.0.1"
        fake.state.authorized_keys = sshd.dir / "authorized_keys"
        yield fake


@pytest.fixture
def configured(
    arm: FakeArm,
    sshd: SSHDServer,
    cloudgpu_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Path, dict[str, str]]:
    write_config(
        cloudgpu_home,
        f'[providers.azure]\narm_endpoint = "{arm.base_url}"\nca_bundle = "{arm.ca_bundle}"\n'
        f'polling_interval = 0\nssh_cidr = "127.0.0.1/32"\nssh_port = {sshd.port}\n'
        f'admin_user = "{sshd.user}"\n[launch]\nssh_timeout = 30\n',
    )
    env = az_login(tmp_path, arm.subscription)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return job_file(tmp_path, JOB), env


def test_launch_runs_on_an_azure_vm_and_deletes_its_group(
    configured: tuple[Path, dict[str, str]], arm: FakeArm, cloudgpu_home: Path
) -> None:
    job, _ = configured
    _, inst, _ = launch_succeeds(job, cloudgpu_home, "azure")
    assert inst.instance_type.startswith("Standard_NC")
    vm_puts = [
        b for m, p, b in arm.state.requests if m == "PUT" and "/virtualmachines/" in p.lower()
    ]
    assert len(vm_puts) == 1
    nsg = next(b for m, p, b in arm.state.requests if "networksecuritygroups" in p.lower())
    assert nsg["properties"]["securityRules"][0]["properties"]["sourceAddressPrefix"] == (
        "127.0.0.1/32"
    )
    assert arm.state.groups == {} and arm.state.resources == {}  # deleted and verified


def test_launch_as_subprocess(
    configured: tuple[Path, dict[str, str]], arm: FakeArm, cloudgpu_home: Path
) -> None:
    job, env = configured
    launch_in_subprocess(job, cloudgpu_home, env, TOKEN)
    assert arm.state.groups == {}


def test_no_capacity_fails_cleanly_and_leaves_nothing(
    configured: tuple[Path, dict[str, str]], arm: FakeArm, tmp_path: Path
) -> None:
    # One region: each offer tried is a group made and deleted; the T4 sizes of eight
    # regions took ~25 s and proved nothing more than those of one.
    one_region = launch_job("az-life", "T4", "azure", resources="  regions: [eastus]\n", probe="")
    job = job_file(tmp_path, one_region, name="one-region.yaml")
    for size in (
        "Standard_NC4as_T4_v3",
        "Standard_NC8as_T4_v3",
        "Standard_NC16as_T4_v3",
        "Standard_NC64as_T4_v3",
    ):
        arm.state.vm_failures[size] = ("sync", "error_sku_not_available.json")
    err = launch_fails_cleanly(job)
    assert "SkuNotAvailable" in err or "capacity" in err.lower()
    assert arm.state.groups == {}
    tried = {p.lower().split("/resourcegroups/")[1] for m, p, _ in arm.state.requests
             if m == "PUT" and p.lower().count("/") == 4}  # fmt: skip
    assert len(tried) == 4  # each of eastus's four T4 sizes, then a clear failure


SPOT_JOB = """\
name: az-spot
resources:
  gpu: T4
  spot: true
  providers: [azure]
env:
  MARK: {mark}
run: |
  if [ -f "$MARK" ]; then echo "resumed on $CLOUDGPU_INSTANCE"; else touch "$MARK"; sleep 120; fi
limits:
  max_runtime: 5m
  max_cost: 5
"""


def test_spot_eviction_moves_the_job_to_another_offer(
    configured: tuple[Path, dict[str, str]], arm: FakeArm, cloudgpu_home: Path, tmp_path: Path
) -> None:
    mark = tmp_path / "first-run-started"
    job = job_file(tmp_path, SPOT_JOB.format(mark=mark), name="spot.yaml")
    config = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).config_file
    config.write_text(
        config.read_text().replace(
            "polling_interval = 0\n", "polling_interval = 0\nnotice_poll_s = 1\n"
        )
    )

    def evict_when_running() -> None:
        wait_for(mark.exists, timeout=120, what="the first run to start")
        (group,) = [g["name"] for g in arm.state.groups.values()]
        arm.state.evict(group)

    evictor = threading.Thread(target=evict_when_running, daemon=True)
    evictor.start()
    code, out, err = main_exit(["launch", str(job), "--yes"])
    evictor.join(5)
    assert code == 0, err
    assert "resumed on" in out
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "succeeded"
    first, second = sorted(store(cloudgpu_home).instances(rec.id), key=lambda i: i.created_at)
    assert (first.state, second.state) == ("preempted", "terminated")
    assert first.market == second.market == "spot"
    assert arm.state.groups == {}


def test_down_orphans_removes_our_left_over_group_only(
    configured: tuple[Path, dict[str, str]], arm: FakeArm, cloudgpu_home: Path
) -> None:
    paths = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)})
    cfg = {**provider_config(arm), "admin_user": "azureuser"}
    provider = AzureProvider(
        ProviderContext(config=cfg, paths=paths, env={}), credential=StaticToken()
    )
    offer = make_offer()
    mine = provider.create(
        CreateRequest(
            offer=offer,
            name="crashed-job-1",
            tags={TAG_JOB: "crashed-job", TAG_OWNER: store(cloudgpu_home).owner_id()},
        )
    )
    theirs = provider.create(
        CreateRequest(
            offer=offer, name="someone-else-1", tags={TAG_JOB: "x", TAG_OWNER: "other@elsewhere"}
        )
    )
    code, out, err = main_exit(["down", "--orphans", "--yes"])
    assert code == 0, err
    assert mine.id in out
    assert set(arm.state.groups) == {theirs.id}


def test_a_scheduled_events_preempt_read_over_ssh_resumes_and_is_acknowledged(
    configured: tuple[Path, dict[str, str]],
    arm: FakeArm,
    scratch: Path,
    cloudgpu_home: Path,
    tmp_path: Path,
) -> None:
    """ARM shows nothing yet (the VM is still there); the VM's own Scheduled Events say
    Preempt, 30 s ahead: the watcher sees it, the lifecycle reads it over SSH, flushes
    the checkpoint, and only then does the watcher acknowledge the event."""
    job = job_file(
        tmp_path,
        "name: az-notice\nresources:\n  gpu: T4\n  spot: true\n  providers: [azure]\n"
        + RESUMABLE_RUN,
    )
    with AzureImds() as imds:
        config = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).config_file
        config.write_text(
            config.read_text().replace(
                "polling_interval = 0\n",
                f'polling_interval = 0\nimds_endpoint = "{imds.endpoint}"\n'
                f'nvme_mount = "{scratch}"\n',
            )
        )
        events: list[str] = []

        def evict_first_vm() -> None:
            (group,) = arm.state.groups.values()
            events.append(imds.preempt(group["tags"]["cloudgpu-azure-vm"]))

        with announce_when_progressed(scratch, evict_first_vm):
            code, out, err = main_exit(["launch", str(job), "--yes"])
        assert code == 0, err
        resumed_after_inside_notice(out, err)
        wait_for(lambda: imds.started == events, timeout=20, what="the event acknowledged")
    (rec,) = store(cloudgpu_home).jobs()
    first, second = sorted(store(cloudgpu_home).instances(rec.id), key=lambda i: i.created_at)
    assert (first.state, second.state) == ("preempted", "terminated")
    assert arm.state.groups == {}


TWO_NODES = """\
name: az-two
num_nodes: 2
resources: {gpu: T4, spot: false, providers: [azure]}
run: echo "rank $NODE_RANK of $NNODES master $MASTER_ADDR nodes $CLOUDGPU_NODE_IPS"
limits: {max_runtime: 5m}
"""


def test_two_nodes_in_one_group_after_a_group_that_could_not_be_filled(
    configured: tuple[Path, dict[str, str]], arm: FakeArm, tmp_path: Path
) -> None:
    """The cheapest size has room for one VM only: its group is deleted whole and the
    next offer gets both nodes, in one group with one proximity placement group; both
    nodes see rank 0's private address as the rendezvous; everything goes after."""
    arm.state.capacity[("eastus", "Standard_NC4as_T4_v3")] = 1
    job = job_file(tmp_path, TWO_NODES, name="two.yaml")
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    for rank in (0, 1):
        assert f"[node {rank}] rank {rank} of 2 master 10.0.0.4 nodes 10.0.0.4,10.0.0.5" in out
    vms = [
        (b["location"], b["properties"]["hardwareProfile"]["vmSize"])
        for m, p, b in arm.state.requests
        if m == "PUT" and "/virtualmachines/" in p.lower()
    ]
    assert vms[0] == vms[1] and vms[0][1] == "Standard_NC4as_T4_v3"  # the second failed
    assert len(vms) == 4 and vms[2] == vms[3] != vms[0]  # the next offer: both nodes
    groups = {
        p.lower().split("/resourcegroups/")[1].split("/")[0]
        for m, p, _ in arm.state.requests
        if m == "PUT" and "/virtualmachines/" in p.lower()
    }
    assert len(groups) == 2  # one group per attempt, both nodes of each in it
    ppgs = [
        p
        for m, p, _ in arm.state.requests
        if m == "PUT" and "proximityplacementgroups" in p.lower()
    ]
    schedules = [p for m, p, _ in arm.state.requests if m == "PUT" and "/schedules/" in p.lower()]
    # The deadline on every node made: the first attempt's rank 0 got its schedule before
    # rank 1 was seen failing (its group went whole), then both nodes of the second.
    assert len(ppgs) == 2 and len(schedules) == 3
    assert arm.state.groups == {} and arm.state.resources == {}


def test_down_orphans_sweeps_a_multi_node_group_with_its_placement_group(
    configured: tuple[Path, dict[str, str]], arm: FakeArm, cloudgpu_home: Path
) -> None:
    paths = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)})
    provider = AzureProvider(
        ProviderContext(config=provider_config(arm), paths=paths, env={}), credential=StaticToken()
    )
    owner = store(cloudgpu_home).owner_id()
    made = []
    for job, who in (("crashed-two", owner), ("their-two", "other@elsewhere")):
        reqs = [
            CreateRequest(
                offer=make_offer(), name=f"{job}-{r}", tags={TAG_JOB: job, TAG_OWNER: who},
                group=f"{job}-g", node_rank=r, num_nodes=2,
            )
            for r in range(2)
        ]  # fmt: skip
        made.append(provider.create_nodes(reqs))
    mine, theirs = (nodes[0].extra["resource_group"] for nodes in made)
    code, out, err = main_exit(["down", "--orphans", "--yes"])
    assert code == 0, err
    assert all(n.id in out for n in made[0])
    assert set(arm.state.groups) == {theirs.lower()}
    assert not [r for r in arm.state.resources if f"/resourcegroups/{mine.lower()}/" in r]
