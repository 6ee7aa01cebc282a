"""The fault matrix on GCP: the Compute fake through the real google-cloud-compute SDK.

create() makes the job's firewall rule first, then inserts the VM. The client is killed
(-9) at the worst moment, as its VM insert reaches the API, and the insert never lands
(a VM that did land is an ordinary orphan: tests/providers/test_gcp_lifecycle.py);
`down --orphans --yes` must leave no VM and no firewall rule carrying this store's owner
id.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.midcreate import kill_mid_create
from tests.faults.record import Case
from tests.fixtures.gcp.server import FakeGCP
from tests.lifecycle.helpers import main_exit
from tests.providers.gcp_kit import fake
from tests.providers.lifecycle_kit import write_config

pytestmark = pytest.mark.slow
__all__ = ["fake"]  # the fixture, imported for pytest

INSERT = r"/zones/[^/]+/instances$"
JOB = """\
name: gcp-kill
resources: {gpu: L4, spot: false, providers: [gcp]}
run: echo never runs
"""


def test_kill9_between_the_firewall_rule_and_the_vm(
    case: Case, fake: FakeGCP, cloudgpu_home: Path, tmp_path: Path
) -> None:
    case.cloud, case.fault = "gcp (fake)", "kill -9 of the client mid-create"
    case.stage = "provisioning (rule made, VM insert lost)"
    write_config(
        cloudgpu_home,
        f'[providers.gcp]\nproject = "{fake.project}"\nanonymous = true\n'
        f'endpoint_url = "{fake.endpoint}"\nssh_cidr = "127.0.0.1/32"\n'
        "poll_s = 0\nbackoff_s = 0\n[providers.local]\nenabled = false\n",
    )
    code, _, err = main_exit(["catalog", "refresh", "--provider", "gcp"])
    assert code == 0, err
    fake.fail_next.append(("POST", INSERT, "error_backend"))  # the insert never lands
    kill_mid_create(
        case, cloudgpu_home, tmp_path, JOB,
        hook=lambda f: setattr(fake, "on_request", f),
        at=("POST", INSERT),
        left=lambda: sorted(fake.firewalls) + [name for _, name in fake.instances],
    )  # fmt: skip
