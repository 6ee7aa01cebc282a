"""The fault matrix on Azure: the ARM fake (loopback HTTPS) through the real Azure SDK.

create() makes the job's resource group first, then its network and VM in it. The client
is killed (-9) at the worst moment, as the first resource inside the group is being
created; `down --orphans --yes` must leave no resource group carrying this store's
owner id (a group is the instance record on Azure, whatever its VM's state).
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
    kill_mid_create(
        case, cloudgpu_home, tmp_path, JOB,
        hook=lambda f: setattr(arm.state, "on_request", f),
        at=("PUT", INSIDE),
        left=lambda: sorted(g["name"] for g in arm.state.groups.values()),
        env=az_login(tmp_path, arm.subscription),
    )  # fmt: skip
