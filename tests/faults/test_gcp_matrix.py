"""The fault matrix on GCP: the Compute fake through the real google-cloud-compute SDK.

create() makes the job's firewall rule first, then inserts the VM. The client is killed
(-9) at the worst moment, as its VM insert reaches the API, and the insert never lands
(a VM that did land is an ordinary orphan: tests/providers/test_gcp_lifecycle.py);
`down --orphans --yes` must leave no VM and no firewall rule carrying this store's owner
id.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.record import Case, digest
from tests.faults.simkit import launch_proc
from tests.fixtures.gcp.server import FakeGCP
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, store
from tests.providers.lifecycle_kit import write_config

pytestmark = pytest.mark.slow

INSERT = r"/zones/[^/]+/instances$"
JOB = """\
name: gcp-kill
resources: {gpu: L4, spot: false, providers: [gcp]}
run: echo never runs
"""


@pytest.fixture
def fake() -> Iterator[FakeGCP]:
    server = FakeGCP().start()
    yield server
    server.stop()


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
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own notes\n")
    before = digest(mine)
    client: list[subprocess.Popen[bytes]] = []

    def kill_at_insert(method: str, path: str) -> None:
        if method == "POST" and re.search(INSERT, path) and client:
            client[0].kill()  # the rule exists; the VM's insert is on the wire

    fake.fail_next.append(("POST", INSERT, "error_backend"))  # the insert never lands
    fake.on_request = kill_at_insert
    proc = launch_proc(job_file(tmp_path, JOB), cloudgpu_home)
    client.append(proc)
    proc.communicate(timeout=120)
    fake.on_request = None
    assert fake.firewalls, "the rule should exist when the client dies"
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home)
    left = sorted(fake.firewalls) + [name for _, name in fake.instances]
    live = store(cloudgpu_home).instances(live_only=True)
    said = "; ".join(res.stdout.strip().splitlines()[:2])
    case.check(
        leaks=len(left) + len(live),
        data_lost=digest(mine) != before,
        exit_ok=proc.returncode == -9 and res.returncode == 0,
        outcome=f"`down --orphans` exit {res.returncode}: {said}"
        + (f"; left {left}" if left else ""),
    )
