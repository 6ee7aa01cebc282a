"""templates/bootstrap.sh on this machine: NVMe dir prepared, deadline stops the job."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cloudgpu.builtin.local import LocalProvider
from cloudgpu.builtin.procs import stop_tagged, tagged_pids
from cloudgpu.lifecycle.bootstrap import bootstrap, may_dispose, script
from cloudgpu.paths import Paths
from cloudgpu.provider import (
    TAG_JOB,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    ProviderContext,
    SSHTarget,
)
from cloudgpu.remote import LocalMachine
from tests.lifecycle.helpers import wait_for


def test_script_is_valid_sh() -> None:
    subprocess.run(["sh", "-n", "-c", script()], check=True)


def test_prepares_nvme_dir_without_formatting(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    line = bootstrap(m, Instance("inst-a", "local", InstanceState.RUNNING), Capabilities(), None)
    assert line.startswith(f"nvme={m.nvme_path} ") and "devices=0" in line
    assert not (Path(m.nvme_path) / ".cloudgpu" / "deadline.pid").exists()


def test_deadline_stops_tagged_processes_with_no_client(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    iid = f"inst-{time.monotonic_ns()}"
    bootstrap(m, Instance(iid, "local", InstanceState.RUNNING), Capabilities(), time.time() + 2)
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={"CLOUDGPU_INSTANCE": iid, "PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    # The bootstrap's own subreaper lets go once only the watchdog is left below it.
    wait_for(lambda: tagged_pids(iid) == [job.pid], timeout=10, what="only the job tagged")
    wait_for(lambda: job.poll() is not None, timeout=30, what="deadline to stop the job")
    assert (Path(m.nvme_path) / ".cloudgpu" / "deadline.fired").exists()
    assert tagged_pids(iid) == []


def test_terminating_a_local_instance_ends_its_watchdog(paths: Paths) -> None:
    p = LocalProvider(ProviderContext(config={}, paths=paths, env={}))
    inst = p.create(CreateRequest(offer=p.offers()[0], name="wd", tags={TAG_JOB: "wd"}))
    bootstrap(LocalMachine(Path(inst.workdir)), inst, p.capabilities, time.time() + 3600)
    # The watchdog is not one of the job's processes (the bootstrap's subreaper lets go).
    wait_for(
        lambda: bool(tagged_pids(inst.id, watchdog=True)) and not tagged_pids(inst.id),
        what="watchdog started",
    )
    p.terminate(inst.id)
    assert tagged_pids(inst.id, watchdog=True) == []


def test_never_disposes_of_this_computer() -> None:
    caps = Capabilities(disposable=True)

    def at(host: str) -> Instance:
        return Instance("i", "x", InstanceState.RUNNING, ssh=SSHTarget(host=host))

    assert may_dispose(at("203.0.113.7"), caps)
    assert may_dispose(at("ec2-1-2-3-4.compute.amazonaws.com"), caps)
    for host in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"):
        assert not may_dispose(at(host), caps), host
    assert not may_dispose(at("203.0.113.7"), Capabilities(disposable=False))
    local = Instance("i", "local", InstanceState.RUNNING, workdir="/tmp/x")
    assert not may_dispose(local, caps)


def test_loopback_instance_of_a_disposable_provider_is_not_powered_off(tmp_path: Path) -> None:
    # A cloud's test double on this computer: the watchdog must not carry the flag.
    m = LocalMachine(tmp_path / "ws")
    inst = Instance("loop-1", "fake", InstanceState.RUNNING, ssh=SSHTarget(host="127.0.0.1"))
    bootstrap(m, inst, Capabilities(disposable=True), time.time() + 3600)
    wait_for(  # the watchdog is up and the bootstrap's subreaper has let go of it
        lambda: bool(tagged_pids("loop-1", watchdog=True)) and not tagged_pids("loop-1"),
        what="watchdog",
    )
    for pid in tagged_pids("loop-1", watchdog=True):  # the watchdog and its sleep
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"CLOUDGPU_DISPOSABLE=0" in env
    stop_tagged("loop-1")
    assert tagged_pids("loop-1", watchdog=True) == []


FAKE_LSBLK = """#!/bin/sh
# one blank NVMe disk: whole disk, no partitions, no filesystem, not mounted
case "$*" in
  *-dpno*) echo "/dev/nvme9n1 disk" ;;
  *"-no NAME"*) echo "nvme9n1" ;;
  *) echo "" ;;
esac
"""


def _fake_tools(bin_dir: Path, log: Path, with_sudo: bool) -> None:
    bin_dir.mkdir()
    tools = {"lsblk": FAKE_LSBLK}
    for name in ("mkfs.ext4", "mount", "mdadm"):
        tools[name] = f'#!/bin/sh\necho "{name} $*" >> {log}\n'
    if with_sudo:  # passwordless sudo that records what it was asked to run, then runs it
        tools["sudo"] = f'#!/bin/sh\n[ "$1" = -n ] && shift\necho "sudo $*" >> {log}\nexec "$@"\n'
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


@pytest.mark.parametrize("with_sudo", [True, False])
def test_login_user_formats_nvme_only_through_passwordless_sudo(with_sudo: bool) -> None:
    # A cloud image's default user (not root): disk work must go through `sudo -n`, and
    # without sudo the NVMe is only a directory. Run as `nobody` with fake disk tools.
    work = Path(tempfile.mkdtemp(prefix="cgpu-boot-"))
    try:
        work.chmod(0o777)
        log = work / "calls.log"
        log.touch()
        log.chmod(0o666)
        _fake_tools(work / "bin", log, with_sudo)
        nvme = work / "nvme"
        env = {
            "PATH": f"{work / 'bin'}:/usr/bin:/bin:/usr/sbin:/sbin",
            "CLOUDGPU_NVME": str(nvme),
            "CLOUDGPU_INSTANCE": "boot-nonroot",
            "CLOUDGPU_DISPOSABLE": "1",
            "CLOUDGPU_DEADLINE": "",
        }
        out = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                script(),
                "cloudgpu-bootstrap",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        calls = log.read_text()
        if with_sudo:
            assert "sudo mkfs.ext4 -q -F -E nodiscard -m 0 /dev/nvme9n1" in calls
            assert f"sudo mount -o noatime /dev/nvme9n1 {nvme}" in calls
        else:
            assert calls == ""  # nothing formatted or mounted
        assert out.stdout.strip().splitlines()[-1].startswith(f"nvme={nvme} ")
    finally:
        shutil.rmtree(work, ignore_errors=True)
