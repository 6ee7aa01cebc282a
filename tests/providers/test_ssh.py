"""The `ssh` provider against a real OpenSSH server on loopback, and launch over it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudgpu.builtin.procs import tagged_pids
from cloudgpu.builtin.ssh import SSHProvider, parse_hosts
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, ConfigError
from cloudgpu.paths import Paths
from cloudgpu.provider import InstanceState, ProviderContext
from cloudgpu.remote import connect
from cloudgpu.testing import ProviderContract
from tests.lifecycle.helpers import TEMPLATES, job_file, main_exit, store, wait_for
from tests.remote.sshd import SSHDServer, free_port, start_sshd

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH")


def host_table(server: SSHDServer, nvme: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "box1",
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "key": str(server.key_path),
        "gpus": "A100-80GB:2",
        "nvme": str(nvme),
        "nvme_gb": 100.0,
        "price_per_hour": 1.5,
        "vcpus": 8,
        "memory_gb": 64.0,
        **extra,
    }


def make(paths: Paths, hosts: list[dict[str, Any]]) -> SSHProvider:
    return SSHProvider(ProviderContext(config={"hosts": hosts}, paths=paths, env={}))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SSHDServer]:
    s = start_sshd(tmp_path / "sshd")
    try:
        yield s
    finally:
        s.stop()


class TestSSHContract(ProviderContract):
    provider_name = "ssh"

    @pytest.fixture
    def provider(self, paths: Paths, server: SSHDServer, tmp_path: Path) -> SSHProvider:
        return make(paths, [host_table(server, tmp_path / "nvme")])

    @pytest.fixture
    def offer(self, provider: SSHProvider) -> Offer:
        return provider.offers()[0]


def test_offer_from_declared_gpus(paths: Paths, server: SSHDServer, tmp_path: Path) -> None:
    (o,) = make(paths, [host_table(server, tmp_path)]).offers()
    assert (o.gpu, o.gpu_count, o.gpu_memory_gb) == ("A100-80GB-PCIe", 2, 80)
    assert o.instance_type == "box1" and o.price_per_hour == 1.5


def test_check_probes_and_pins_host_key(paths: Paths, server: SSHDServer, tmp_path: Path) -> None:
    table = host_table(server, tmp_path)
    del table["vcpus"], table["gpus"]
    p = make(paths, [table])
    av = p.check()
    assert av.enabled and "box1" in av.reason
    assert f"pinned [127.0.0.1]:{server.port} {server.host_key_fingerprint}" in av.reason
    (o,) = p.offers()
    assert o.vcpus >= 1 and o.gpu_count == 0  # no nvidia-smi on this machine
    known = (paths.data_dir / "known_hosts").read_text()
    assert f"[127.0.0.1]:{server.port}" in known


def test_busy_host_is_a_capacity_error(paths: Paths, server: SSHDServer, tmp_path: Path) -> None:
    p = make(paths, [host_table(server, tmp_path)])
    req = TestSSHContract().request(p.offers()[0])
    inst = p.create(req)
    assert p.create(req).id == inst.id  # same token: the same reservation
    with pytest.raises(CapacityError, match="busy"):
        p.create(TestSSHContract().request(p.offers()[0]))
    p.terminate(inst.id)
    assert p.describe(inst.id).state == InstanceState.TERMINATED


def test_bad_config(paths: Paths) -> None:
    with pytest.raises(ConfigError, match=r"hosts\[0\]: unknown key"):
        parse_hosts({"hosts": [{"host": "x", "gpu": "A100"}]})
    with pytest.raises(ConfigError, match="gpus"):
        parse_hosts({"hosts": [{"host": "x", "gpus": "A100:x"}]})
    assert not make(paths, []).availability().enabled


# -- launch over ssh ---------------------------------------------------------------------


def write_config(home: Path, hosts: list[dict[str, Any]], ssh_timeout: float = 5) -> None:
    cfg = home / "config" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"[launch]\nssh_timeout = {ssh_timeout}\n", "[providers.local]\nenabled = false\n"]
    for h in hosts:
        body = ", ".join(f"{k} = {json.dumps(v)}" for k, v in h.items())
        lines.append(f"[[providers.ssh.hosts]]\n{body.replace(', ', chr(10))}\n")
    cfg.write_text("\n".join(lines))


def data_job(tmp_path: Path) -> Path:
    shutil.copytree(TEMPLATES / "quickstart-data", tmp_path / "quickstart-data")
    shutil.copy(TEMPLATES / "quickstart.yaml", tmp_path / "q.yaml")
    text = (tmp_path / "q.yaml").read_text().replace("providers: [local]", "providers: [ssh]")
    return job_file(tmp_path, text.replace("gpu: none", "gpu: A100-80GB:2"), "ssh.yaml")


@pytest.mark.slow
def test_launch_over_ssh_pins_then_refuses_changed_key(
    tmp_path: Path, cloudgpu_home: Path, server: SSHDServer
) -> None:
    write_config(cloudgpu_home, [host_table(server, tmp_path / "nvme")])
    job = data_job(tmp_path)
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert "pinned on first use: SHA256:" in err and server.host_key_fingerprint in err
    assert json.loads((tmp_path / "quickstart-results" / "summary.json").read_text())
    assert not list((cloudgpu_home / "data" / "ssh" / "reservations").glob("*.json"))
    # The same address now presents another key: refused, one line, host released.
    server.stop()
    changed = start_sshd(server.dir, server.port, fresh_host_key=True)
    try:
        code, _, err = main_exit(["launch", str(job), "--yes"])
    finally:
        changed.stop()
    assert code == 5
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "CHANGED" in errors[0] and "refusing" in errors[0]
    assert not list((cloudgpu_home / "data" / "ssh" / "reservations").glob("*.json"))
    last = store(cloudgpu_home).jobs()[-1]
    assert [i.state for i in store(cloudgpu_home).instances(last.id)] == ["terminated"]


@pytest.mark.slow
def test_ssh_auth_failure_and_unreachable(
    tmp_path: Path, cloudgpu_home: Path, server: SSHDServer
) -> None:
    wrong = tmp_path / "wrongkey"
    shutil.copy(server.dir / "host_ed25519", wrong)  # a valid key the server does not accept
    write_config(cloudgpu_home, [host_table(server, tmp_path / "nvme", key=str(wrong))])
    job = data_job(tmp_path)
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 5 and "authentication failed" in err
    write_config(
        cloudgpu_home, [host_table(server, tmp_path / "nvme", port=free_port())], ssh_timeout=1
    )
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 5 and "cannot reach" in err
    assert not list((cloudgpu_home / "data" / "ssh" / "reservations").glob("*.json"))


def test_terminate_stops_the_jobs_processes_on_the_host(
    paths: Paths, server: SSHDServer, tmp_path: Path
) -> None:
    p = make(paths, [host_table(server, tmp_path / "nvme")])
    assert p.check().enabled  # pins the host key (said out loud in the reason)
    inst = p.create(TestSSHContract().request(p.offers()[0]))
    m = connect(inst, known_hosts=paths.data_dir / "known_hosts")
    try:
        # A job process detached from the session, as a job's children may be.
        cmd = f"CLOUDGPU_INSTANCE={inst.id} setsid sleep 300 >/dev/null 2>&1 < /dev/null &"
        assert m.run(cmd) == 0
    finally:
        m.close()
    wait_for(lambda: bool(tagged_pids(inst.id)), what="job process on the host")
    p.terminate(inst.id)
    assert tagged_pids(inst.id) == []  # the "host" is this machine: look directly
    assert p.describe(inst.id).state == InstanceState.TERMINATED
