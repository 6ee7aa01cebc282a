"""The fault matrix on Azure: the ARM fake (loopback HTTPS) through the real Azure SDK.

create() makes the job's resource group first, then its network and VM in it. The client
is killed (-9) at the worst moment, as the first resource inside the group is being
created; `down --orphans --yes` must leave no resource group carrying this store's
owner id (a group is the instance record on Azure, whatever its VM's state). A
multi-node job is killed as its proximity placement group is made: a group without VMs,
which the sweep removes as a leftover.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.midcreate import kill_mid_create
from tests.faults.record import Case
from tests.fixtures.azure.fake_arm import FakeArm
from tests.fixtures.azure.support import az_login
from tests.providers.lifecycle_kit import write_config

pytestmark = pytest.mark.slow

INSIDE = r"/resourcegroups/[^/]+/providers/"  # a resource inside the job's group
JOB = """\
name: az-kill
resources: {gpu: T4, spot: false, providers: [azure]}
run: echo never runs
"""
# A multi-node job's group gets its proximity placement group before any VM: killed
# there, the group holds no VM, so it is no instance but a leftover of the sweep's.
TWO = JOB.replace("name: az-kill\n", "name: az-kill-two\nnum_nodes: 2\n")
PPG = r"/providers/microsoft\.compute/proximityplacementgroups/"


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    with FakeArm(tmp_path) as fake:
        yield fake


@pytest.mark.parametrize(
    ("job", "at", "stage"),
    [
        (JOB, INSIDE, "provisioning (group made, VM not)"),
        (TWO, PPG, "provisioning 2 nodes (group and network made, no VM)"),
    ],
    ids=["one-node", "two-nodes"],
)
def test_kill9_after_the_resource_group_before_the_vm(
    case: Case, arm: FakeArm, cloudgpu_home: Path, tmp_path: Path, job: str, at: str, stage: str
) -> None:
    case.cloud, case.fault = "azure (fake ARM)", "kill -9 of the client mid-create"
    case.stage = stage
    write_config(
        cloudgpu_home,
        f'[providers.azure]\narm_endpoint = "{arm.base_url}"\nca_bundle = "{arm.ca_bundle}"\n'
        'polling_interval = 0\nssh_cidr = "127.0.0.1/32"\n[providers.local]\nenabled = false\n',
    )
    kill_mid_create(
        case, cloudgpu_home, tmp_path, job,
        hook=lambda f: setattr(arm.state, "on_request", f),
        at=("PUT", at),
        left=lambda: sorted(g["name"] for g in arm.state.groups.values()),
        env=az_login(tmp_path, arm.subscription),
    )  # fmt: skip
