"""The fault matrix on AWS: moto's EC2 through the real SDK, a loopback sshd standing in
for the instance (tests/providers/test_aws_lifecycle.py explains the set-up).

kill -9 of the client at each stage, then `down --orphans --yes`: no instance, security
group or key pair left carrying this store's owner id, the user's files intact. Two
homes on one account: neither sweep touches the other's running instance.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from cloudgpu.paths import default_paths
from cloudgpu.provider import CreateRequest
from tests.faults.record import Case
from tests.faults.simkit import job_state, launch_proc
from tests.faults.test_sim_matrix import SIZE, _at, dataset, files_lost, results
from tests.lifecycle.helpers import cli_proc, job_file, store, wait_for
from tests.providers.aws_fixtures.account import (
    config_toml,
    dead_pid,
    ec2_url,
    moto_url,
    owned,
    recorded_job,
)
from tests.providers.aws_fixtures.servers import sshd_network, url_of
from tests.providers.aws_fixtures.setup import FAKE_ENV, REGION, make_provider, offer
from tests.providers.lifecycle_kit import write_config
from tests.remote.sshd import SSHDServer

pytestmark = pytest.mark.slow
__all__ = ["ec2_url", "moto_url", "results"]  # the fixtures, imported for pytest


def kill_leftover_job_processes(job_id: str) -> None:
    """The loopback 'instance' is this machine: end the job's processes (by their
    CLOUDGPU_JOB), as terminating a real instance would."""
    marker = f"CLOUDGPU_JOB={job_id}".encode()
    for env in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError, ValueError):
            if marker in env.read_bytes().split(b"\0"):
                os.kill(int(env.parent.name), signal.SIGKILL)


@pytest.mark.parametrize("stage", ["provisioning", "staging", "running", "collecting", "teardown"])
def test_kill9_on_aws(
    case: Case,
    stage: str,
    moto_url: str,
    sshd: SSHDServer,
    scratch: Path,
    tmp_path: Path,
    cloudgpu_home: Path,
    results: Path,
) -> None:
    case.cloud, case.fault, case.stage = "aws (moto)", "kill -9 of the client", stage
    with sshd_network(moto_url, sshd) as proxy:
        write_config(
            cloudgpu_home,
            f'[providers.aws]\nregions = ["{REGION}"]\nendpoint_url = "{url_of(proxy)}"\n'
            f'ssh_cidr = "127.0.0.1/32"\nssh_port = {sshd.port}\nssh_user = "{sshd.user}"\n'
            f'image_name = "Deep Learning AMI Ubuntu*"\nnvme_mount = "{scratch}"\npoll_s = 0\n'
            "[providers.local]\nenabled = false\n[launch]\nssh_timeout = 30\n",
        )
        dataset(tmp_path, 100_000_000 if stage == "staging" else 10)
        big = (
            "head -c 400000000 /dev/zero > $CLOUDGPU_NVME/out/blob" if stage == "collecting" else ""
        )
        body = (
            f"name: aws-kill-{stage}\nresources: {{gpu: A10G, spot: false, providers: [aws], "
            f"regions: [{REGION}]}}\ndata: [{{src: ./dataset, dst: /nvme/data}}]\nrun: |\n"
            f"  mkdir -p $CLOUDGPU_NVME/out\n"
            f"  yes cloudgpu | head -c {SIZE} > $CLOUDGPU_NVME/out/model.bin\n  {big}\n"
            f"  {'sleep 20' if stage == 'running' else ':'}\n"
            "outputs:\n  - {src: /nvme/out, dst: ./results}\n"
        )
        proc = launch_proc(job_file(tmp_path, body), cloudgpu_home, FAKE_ENV)
        try:
            wait_for(_at_aws(stage, cloudgpu_home, results), timeout=180, what=stage)
        finally:
            proc.kill()
            proc.wait()
        res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home, env=dict(FAKE_ENV))
        jobs = store(cloudgpu_home).jobs()
        kill_leftover_job_processes(jobs[0].id)
        owner = store(cloudgpu_home).owner_id()
        left = owned(moto_url, owner)
        lost, out = files_lost(results)
        case.check(
            leaks=len(left) + len(store(cloudgpu_home).instances(live_only=True)),
            data_lost=lost,
            exit_ok=res.returncode == 0,
            outcome=f"`down --orphans` exit {res.returncode}; {out}; job {jobs[0].state}"
            + (f"; left {left}" if left else ""),
        )


def _at_aws(stage: str, home: Path, results: Path):  # type: ignore[no-untyped-def]
    if stage == "provisioning":  # the create call is out (the record says so)
        return lambda: job_state(home) == "provisioning" and bool(store(home).instances())
    return _at(stage, home, results)


def test_two_homes_on_one_account(case: Case, moto_url: str, ec2_url: str, tmp_path: Path) -> None:
    case.cloud, case.fault, case.stage = "aws (moto)", "two homes on one account", "running"
    two_homes(case, moto_url, ec2_url, tmp_path)


def two_homes(case: Case, moto_url: str, ec2_url: str, tmp_path: Path) -> None:
    homes = [tmp_path / "home-a", tmp_path / "home-b"]
    provs, insts, owners = [], [], []
    for i, home in enumerate(homes):
        write_config(home, config_toml(ec2_url))
        job = f"job-{'ab'[i]}-0001"
        # Both live: this process is their client.
        tags = recorded_job(store(home), job, f"i-rec{i}", "running", os.getpid())
        p = make_provider(ec2_url, default_paths({"CLOUDGPU_HOME": str(home)}), str(tmp_path))
        provs.append(p)
        insts.append(p.create(CreateRequest(offer=offer(), name=f"{job}-x", tags=tags)))
        owners.append(store(home).owner_id())
    # A's client dies; each home sweeps: A removes its own orphan, B touches nothing of A.
    store(homes[0]).update_job("job-a-0001", pid=dead_pid())
    res_b = cli_proc(["down", "--orphans", "--yes"], homes[1], env=dict(FAKE_ENV))
    a_alive_after_b = not provs[0].describe(insts[0].id).state.is_gone
    res_a = cli_proc(["down", "--orphans", "--yes"], homes[0], env=dict(FAKE_ENV))
    b_alive = not provs[1].describe(insts[1].id).state.is_gone
    left_a = owned(moto_url, owners[0])
    provs[1].terminate(insts[1].id)
    case.check(
        leaks=len(left_a) + len(owned(moto_url, owners[1])),
        data_lost=not (a_alive_after_b and b_alive),
        exit_ok=res_a.returncode == 0 and res_b.returncode == 0,
        outcome=f"B's sweep left A's instance ({a_alive_after_b}); A's sweep removed its "
        f"own orphan and left B's running one ({b_alive})",
    )
