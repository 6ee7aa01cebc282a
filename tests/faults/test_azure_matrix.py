"""The fault matrix on Azure: the ARM fake (loopback HTTPS) through the real Azure SDK.

create() makes the job's resource group first, then its network and VM in it. The client
is killed (-9) at the worst moment, as the first resource inside the group is being
created; `down --orphans --yes` must leave no resource group carrying this store's
owner id (a group is the instance record on Azure, whatever its VM's state).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.record import Case, digest
from tests.faults.simkit import launch_proc
from tests.fixtures.azure.fake_arm import FakeArm
from tests.fixtures.azure.support import az_login
from tests.lifecycle.helpers import cli_proc, job_file, store
from tests.providers.lifecycle_kit import write_config

pytestmark = pytest.mark.slow

INSIDE = r"/resourcegroups/[^/]+/providers/"  # a resource inside the job's group
JOB = """\
name: az-kill
resources: {gpu: T4, spot: false, providers: [azure]}
run: echo never runs
"""


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    with FakeArm(tmp_path) as fake:
        yield fake


def test_kill9_after_the_resource_group_before_the_vm(
    case: Case, arm: FakeArm, cloudgpu_home: Path, tmp_path: Path
) -> None:
    case.cloud, case.fault = "azure (fake ARM)", "kill -9 of the client mid-create"
    case.stage = "provisioning (group made, VM not)"
    write_config(
        cloudgpu_home,
        f'[providers.azure]\narm_endpoint = "{arm.base_url}"\nca_bundle = "{arm.ca_bundle}"\n'
        'polling_interval = 0\nssh_cidr = "127.0.0.1/32"\n[providers.local]\nenabled = false\n',
    )
    env = az_login(tmp_path, arm.subscription)
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own notes\n")
    before = digest(mine)
    client: list[subprocess.Popen[bytes]] = []

    def kill_inside_the_group(method: str, path: str) -> None:
        if method == "PUT" and re.search(INSIDE, path, re.I) and client:
            client[0].kill()  # the group exists; its first resource is on the wire

    arm.state.on_request = kill_inside_the_group
    proc = launch_proc(job_file(tmp_path, JOB), cloudgpu_home, env)
    client.append(proc)
    proc.communicate(timeout=120)
    arm.state.on_request = None
    assert arm.state.groups, "the group should exist when the client dies"
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home, env=env)
    left = sorted(g["name"] for g in arm.state.groups.values())
    live = store(cloudgpu_home).instances(live_only=True)
    said = "; ".join(res.stdout.strip().splitlines()[:2])
    case.check(
        leaks=len(left) + len(live),
        data_lost=digest(mine) != before,
        exit_ok=proc.returncode == -9 and res.returncode == 0,
        outcome=f"`down --orphans` exit {res.returncode}: {said}"
        + (f"; left {left}" if left else ""),
    )
