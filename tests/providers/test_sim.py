"""The sim provider: the shared contract plus what only a simulated cloud can show.

Every instance here is a real sshd in its own namespace; the fixture terminates whatever
a test leaves behind, so no process outlives the test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.sim import SimProvider

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, ConfigError, HostKeyError, RemoteError
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, CreateRequest, Instance, InstanceState, ProviderContext
from cloudgpu.remote import Machine, connect
from cloudgpu.testing import PlacementOf, ProviderContract

SimFactory = Callable[..., SimProvider]


@pytest.fixture
def make_sim(paths: Paths) -> Iterator[SimFactory]:
    made: list[SimProvider] = []

    def make(**config: Any) -> SimProvider:
        p = SimProvider(ProviderContext(config={"enabled": True, **config}, paths=paths, env={}))
        made.append(p)
        return p

    yield make
    if made:  # whatever a test left running is stopped: no process outlives it
        for d in sorted((paths.data_dir / "sim").glob("sim-*")):
            made[0].terminate(d.name)


@pytest.fixture
def provider(make_sim: SimFactory) -> SimProvider:
    return make_sim()


@pytest.fixture
def offer(provider: SimProvider) -> Offer:
    return next(
        o for o in provider.offers() if o.instance_type == "g5.xlarge" and o.market == "on_demand"
    )


class TestSimContract(ProviderContract):
    provider_name = "sim"

    @pytest.fixture
    def placement_of(self, provider: SimProvider) -> PlacementOf:
        """The group in the instance's own record: the sim's placement."""
        return lambda i: provider.describe(i.id).extra["group"]


class ReplacementOutsideGroupSim(SimProvider):
    """Claims replace_node, places a group's first nodes together, then makes a
    replacement outside the group (it ignores request.group in create())."""

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        return [SimProvider.create(self, r) for r in requests]

    def create(self, request: CreateRequest) -> Instance:
        return super().create(dataclasses.replace(request, group=""))


class NoReplaceSim(SimProvider):
    capabilities = dataclasses.replace(SimProvider.capabilities, replace_node=False)


def test_the_replace_node_check_can_fail(paths: Paths, offer: Offer) -> None:
    """The contract's replace_node check catches a replacement outside the live group
    and a claim with no way to see placements; a provider not claiming it is skipped."""
    ctx = ProviderContext(config={"enabled": True}, paths=paths, env={})
    suite, wrong = TestSimContract(), ReplacementOutsideGroupSim(ctx)
    try:
        with pytest.raises(AssertionError, match="the replacement is outside the group"):
            suite.test_replace_node_joins_the_live_group(
                wrong, offer, lambda i: wrong.describe(i.id).extra["group"]
            )
        assert wrong.list_instances({}) == []  # the check cleaned up after itself
        with pytest.raises(AssertionError, match="must supply a placement_of fixture"):
            suite.test_replace_node_joins_the_live_group(wrong, offer, None)
        with pytest.raises(pytest.skip.Exception, match="does not claim"):
            suite.test_replace_node_joins_the_live_group(NoReplaceSim(ctx), offer, None)
    finally:
        for d in sorted((paths.data_dir / "sim").glob("sim-*")):
            wrong.terminate(d.name)


def request(offer: Offer, **kw: Any) -> CreateRequest:
    job = f"t-{uuid.uuid4().hex[:8]}"
    return CreateRequest(offer=offer, name=job, tags={TAG_JOB: job}, **kw)


def wait_state(p: SimProvider, iid: str, state: InstanceState, limit: float = 30) -> Instance:
    deadline = time.monotonic() + limit
    while (inst := p.describe(iid)).state != state and time.monotonic() < deadline:
        time.sleep(0.05)
    assert inst.state == state, (inst.state, inst.extra)
    return inst


def machine(p: SimProvider, inst: Instance, paths: Paths) -> Machine:
    return connect(
        wait_state(p, inst.id, InstanceState.RUNNING), known_hosts=paths.data_dir / "known_hosts"
    )


def sh(m: Machine, command: str) -> str:
    out: list[bytes] = []
    assert m.run(command, on_stdout=out.append) == 0
    return b"".join(out).decode()


def test_opt_in_only(paths: Paths) -> None:
    off = SimProvider(ProviderContext(config={}, paths=paths, env={}))
    assert not off.availability().enabled
    assert "CLOUDGPU_SIM=1" in off.availability().reason
    by_env = SimProvider(ProviderContext(config={}, paths=paths, env={"CLOUDGPU_SIM": "1"}))
    assert by_env.availability().enabled


def test_default_offers_are_real_prices_relabelled(provider: SimProvider) -> None:
    offers = provider.offers()
    assert {o.market for o in offers} == {"on_demand", "spot"}
    g5 = next(o for o in offers if o.instance_type == "g5.xlarge" and o.market == "on_demand")
    assert g5.gpu == "A10G" and g5.nvme_gb > 0
    assert g5.price_source.startswith("sim:snapshot:")


def test_configured_offers_and_bad_config(make_sim: SimFactory) -> None:
    tiny = {"instance_type": "tiny", "gpu": "L4", "gpu_count": 1, "gpu_memory_gb": 24}
    tiny |= {"vcpus": 4, "memory_gb": 16, "price_per_hour": 0.5, "market": "spot"}
    p = make_sim(offers=[tiny])
    assert [(o.instance_type, o.market, o.provider) for o in p.offers()] == [
        ("tiny", "spot", "sim")
    ]
    with pytest.raises(ConfigError, match=r"providers\.sim\.offers\[0\]: missing gpu_count"):
        make_sim(offers=[{"instance_type": "x", "gpu": "L4"}]).offers()
    with pytest.raises(ConfigError, match=r"providers\.sim\.boot_delay"):
        make_sim(boot_delay="soon").create(request(p.offers()[0]))


def test_boot_delay_then_running_and_billing(
    make_sim: SimFactory, offer: Offer, paths: Paths
) -> None:
    p = make_sim(boot_delay=1.0)
    inst = p.create(request(offer))
    assert p.describe(inst.id).state == InstanceState.PENDING
    m = connect(inst, known_hosts=paths.data_dir / "known_hosts", timeout=30)  # waits for boot
    assert sh(m, "echo up") == "up\n"
    m.close()
    running = p.describe(inst.id)
    assert running.state == InstanceState.RUNNING and running.launched_at
    p.terminate(inst.id)
    gone = p.describe(inst.id)
    assert gone.state == InstanceState.TERMINATED
    assert gone.extra["terminated_at"] >= running.launched_at  # billed seconds = difference


def test_capacity_limit(make_sim: SimFactory, offer: Offer) -> None:
    p = make_sim(capacity={offer.instance_type: 1})
    first = p.create(request(offer))
    with pytest.raises(CapacityError, match=f"no capacity for {offer.instance_type}"):
        p.create(request(offer))
    p.terminate(first.id)
    p.terminate(p.create(request(offer)).id)


def test_idempotent_create(provider: SimProvider, offer: Offer) -> None:
    req = request(offer, idempotency_token="tok-1")
    a = provider.create(req)
    b = provider.create(req)
    assert a.id == b.id
    assert len(provider.list_instances({TAG_JOB: req.tags[TAG_JOB]})) == 1


def test_preemption_notice_inside_and_outside(provider: SimProvider, paths: Paths) -> None:
    spot = next(o for o in provider.offers() if o.market == "spot")
    inst = provider.create(request(spot))
    m = machine(provider, inst, paths)
    assert provider.preemption_notice(inst) is None
    assert sh(m, 'test -e "$CLOUDGPU_PREEMPTION_NOTICE" && echo yes || echo no') == "no\n"
    provider.preempt(inst.id, notice=60)
    deadline = time.monotonic() + 10
    while provider.preemption_notice(inst) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    at = provider.preemption_notice(inst)
    assert at is not None and at > time.time()
    notice = json.loads(sh(m, 'cat "$CLOUDGPU_PREEMPTION_NOTICE"'))
    assert notice["action"] == "terminate" and notice["unix_time"] == pytest.approx(at)
    m.close()
    provider.preempt(inst.id, notice=0)
    gone = wait_state(provider, inst.id, InstanceState.PREEMPTED)
    assert gone.extra["reason"].startswith("spot instance preempted")


def test_configured_spot_preemption(make_sim: SimFactory) -> None:
    p = make_sim(preempt_after=1.0, preempt_notice=0.5)
    spot = next(o for o in p.offers() if o.market == "spot")
    inst = p.create(request(spot))
    gone = wait_state(p, inst.id, InstanceState.PREEMPTED)
    assert gone.extra["preempt_at"] >= gone.launched_at + 1.0


@pytest.mark.slow
def test_deadline_stops_instance_with_no_client(paths: Paths) -> None:
    # The creating client is a separate process that exits at once: only the
    # instance-side watchdog is left to enforce the deadline.
    script = """
import time
from cloudgpu.paths import default_paths
from cloudgpu.provider import CreateRequest, ProviderContext
from cloudgpu_providers.sim import SimProvider
ctx = ProviderContext(config={"enabled": True}, paths=default_paths().ensure(), env={})
p = SimProvider(ctx)
o = next(o for o in p.offers() if o.market == "on_demand")
req = CreateRequest(offer=o, name="dl", tags={"cloudgpu-job": "dl"}, deadline=time.time() + 6)
print(p.create(req).id)
"""  # CLOUDGPU_HOME is inherited: the child sees the same data dir
    iid = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.strip()
    p = SimProvider(ProviderContext(config={"enabled": True}, paths=paths, env={}))
    assert p.describe(iid).state in (
        InstanceState.PENDING,
        InstanceState.RUNNING,
    )  # outlived its client
    gone = wait_state(p, iid, InstanceState.TERMINATED, limit=30)
    assert "deadline" in gone.extra["reason"]
    with pytest.raises(RemoteError, match="cannot reach"):
        connect(gone, known_hosts=paths.data_dir / "known_hosts", timeout=0.5)


def test_each_instance_has_its_own_nvme_and_tmp(
    provider: SimProvider, offer: Offer, paths: Paths
) -> None:
    a, b = provider.create(request(offer)), provider.create(request(offer))
    ma, mb = machine(provider, a, paths), machine(provider, b, paths)
    assert ma.nvme_path == mb.nvme_path == "/nvme"
    sh(ma, "echo from-a > /nvme/mine && echo a > /tmp/t && echo $CLOUDGPU_NVME")
    assert sh(mb, "ls -A /nvme; ls -A /tmp") == ""
    assert sh(ma, "cat /nvme/mine /tmp/t") == "from-a\na\n"
    # Each has its own home, as a fresh VM would: never the host user's dotfiles.
    assert sh(ma, "echo $HOME; touch ~/mine-a").strip().endswith("/home")
    assert not (Path.home() / "mine-a").exists()
    assert (Path(a.extra["dir"]) / "home" / "mine-a").exists()
    assert not (Path(b.extra["dir"]) / "home" / "mine-a").exists()
    assert (Path(a.extra["dir"]) / "nvme" / "mine").read_text() == "from-a\n"
    ma.close()
    mb.close()
    provider.terminate(a.id)
    assert not (Path(a.extra["dir"]) / "nvme" / "mine").exists()  # instance storage is gone


def test_sync_to_sim_nvme(
    provider: SimProvider, offer: Offer, paths: Paths, tmp_path: Path
) -> None:
    src = tmp_path / "data"
    (src / "sub").mkdir(parents=True)
    for i in range(50):
        (src / "sub" / f"f{i}").write_bytes(bytes([i]) * 1000)
    m = machine(provider, provider.create(request(offer)), paths)
    assert m.put_dir(src, "/nvme/data").files_sent == 50
    assert sh(m, "cat /nvme/data/sub/* | wc -c") == "50000\n"
    assert m.put_dir(src, "/nvme/data").files_skipped == 50
    m.close()


def test_disk_full_on_nvme_is_one_line(
    make_sim: SimFactory, offer: Offer, paths: Paths, tmp_path: Path
) -> None:
    p = make_sim(nvme_tmpfs_mb=2)
    src = tmp_path / "big"
    src.mkdir()
    (src / "blob").write_bytes(b"x" * 3_000_000)
    m = machine(p, p.create(request(offer)), paths)
    with pytest.raises(RemoteError, match="No space left on device") as err:
        m.put_dir(src, "/nvme/data")
    assert "\n" not in str(err.value)
    m.close()


def test_host_key_pinned_from_provider(provider: SimProvider, offer: Offer, paths: Paths) -> None:
    inst = wait_state(provider, provider.create(request(offer)).id, InstanceState.RUNNING)
    assert inst.ssh is not None and inst.ssh.host_key_fingerprints[0].startswith("SHA256:")
    seen: list[str] = []
    m = connect(
        inst, known_hosts=paths.data_dir / "kh", on_new_host_key=lambda h, f: seen.append(f)
    )
    m.close()
    assert seen == []
    forged = dataclasses.replace(
        inst, ssh=dataclasses.replace(inst.ssh, host_key_fingerprints=("SHA256:" + "B" * 43,))
    )
    with pytest.raises(HostKeyError):
        connect(forged, known_hosts=paths.data_dir / "kh")


def test_terminate_is_verified_and_idempotent(provider: SimProvider, offer: Offer) -> None:
    inst = wait_state(provider, provider.create(request(offer)).id, InstanceState.RUNNING)
    pid = json.loads((Path(inst.extra["dir"]) / "state.json").read_text())["launcher_pid"]
    provider.terminate(inst.id)
    assert (
        not Path(f"/proc/{pid}/cmdline").exists()
        or Path(f"/proc/{pid}/cmdline").read_bytes() == b""
    )
    provider.terminate(inst.id)
    assert provider.describe(inst.id).state == InstanceState.TERMINATED


def test_without_namespaces_nvme_is_a_plain_directory(
    make_sim: SimFactory, offer: Offer, paths: Paths, tmp_path: Path
) -> None:
    # The fallback for hosts without root or unshare: no private mounts, so the NVMe
    # path is the instance's own directory, exported as $CLOUDGPU_NVME.
    p = make_sim(namespaces=False)
    inst = p.create(request(offer))
    m = machine(p, inst, paths)
    nvme = str(Path(inst.extra["dir"]) / "nvme")
    assert m.nvme_path == nvme
    assert sh(m, "echo $CLOUDGPU_NVME") == nvme + "\n"
    src = tmp_path / "d"
    src.mkdir()
    (src / "f").write_text("x")
    assert m.put_dir(src, nvme + "/data").files_sent == 1
    m.close()
    p.terminate(inst.id)
    assert p.describe(inst.id).state == InstanceState.TERMINATED


def test_authorizes_the_requested_public_key(
    provider: SimProvider, offer: Offer, paths: Paths, tmp_path: Path
) -> None:
    key = tmp_path / "id_test"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    inst = provider.create(request(offer, ssh_public_key=(tmp_path / "id_test.pub").read_text()))
    assert inst.ssh is not None and inst.ssh.key_file is None  # no key of ours made
    running = wait_state(provider, inst.id, InstanceState.RUNNING)
    m = connect(running, known_hosts=paths.data_dir / "known_hosts", key_file=key)
    assert sh(m, "echo in") == "in\n"
    m.close()
    other = tmp_path / "id_other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(RemoteError, match="authentication failed"):
        connect(running, known_hosts=paths.data_dir / "known_hosts", key_file=other)


def test_an_instance_killed_from_outside_reads_as_terminated(
    provider: SimProvider, offer: Offer
) -> None:
    inst = wait_state(provider, provider.create(request(offer)).id, InstanceState.RUNNING)
    pid = json.loads((Path(inst.extra["dir"]) / "state.json").read_text())["launcher_pid"]
    os.kill(pid, signal.SIGKILL)  # the host "lost" the VM without anyone recording it
    gone = wait_state(provider, inst.id, InstanceState.TERMINATED)
    assert gone.extra["reason"] == "instance vanished"
    assert provider.list_instances({TAG_JOB: inst.tags[TAG_JOB]}) == []


def test_killed_between_spawn_and_pid_record_is_found_and_stopped(
    provider: SimProvider, offer: Offer
) -> None:
    # The client died after spawning the launcher but before writing its pid into
    # state.json: the instance must still be listed (it is running and billing) and
    # terminate() must stop it at once, from the launcher's own pid file.
    inst = wait_state(provider, provider.create(request(offer)).id, InstanceState.RUNNING)
    d = Path(inst.extra["dir"])
    st = json.loads((d / "state.json").read_text())
    pid = st.pop("launcher_pid")
    st.pop("launcher_start")
    (d / "state.json").write_text(json.dumps(st))
    assert [i.id for i in provider.list_instances({TAG_JOB: inst.tags[TAG_JOB]})] == [inst.id]
    t0 = time.monotonic()
    provider.terminate(inst.id)
    assert time.monotonic() - t0 < 5
    assert provider.describe(inst.id).state.is_gone
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_port_taken_while_booting_moves_the_instance(
    make_sim: SimFactory, offer: Offer, paths: Paths
) -> None:
    p = make_sim(boot_delay=1.0)
    inst = p.create(request(offer))
    assert inst.ssh is not None
    with socket.socket() as squatter:  # someone else binds the port during boot
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", inst.ssh.port))
        squatter.listen()
        running = wait_state(p, inst.id, InstanceState.RUNNING)
        assert running.ssh is not None and running.ssh.port != inst.ssh.port
        m = connect(running, known_hosts=paths.data_dir / "known_hosts")
        assert sh(m, "echo moved") == "moved\n"
        m.close()
