"""The moto account an AWS test module shares, and what the tests read back from it.

The fixtures are imported by each module that uses them (``__all__`` names them for
pytest); they are module-scoped, so a module's tests share one moto server, which
``moto_server`` resets when the module is done:

* ``moto_url``: moto itself, the DLAMI registered: for tests that put their own
  ``capacity_proxy`` in front of it, or read the account behind the provider's back;
* ``ec2_url``: EC2 as the provider reaches it: the proxy that adds the placement-group
  calls moto lacks, in front of ``moto_url``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from cloudgpu.provider import TAG_EXPIRES, TAG_INSTANCE, TAG_JOB, TAG_LEASE, TAG_OWNER
from cloudgpu.state.store import InstanceRecord, Store
from tests.providers.aws_fixtures.servers import capacity_proxy, moto_server, url_of
from tests.providers.aws_fixtures.setup import REGION, ec2_client, register_dlami


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    with moto_server() as url:
        register_dlami(url)
        yield url


@pytest.fixture(scope="module")
def ec2_url(moto_url: str) -> Iterator[str]:
    with capacity_proxy(moto_url) as proxy:
        yield url_of(proxy)


def config_toml(endpoint: str, extra: str = "") -> str:
    """A ``[providers.aws]`` table pointed at ``endpoint``, as a user would write it."""
    return (
        f'[providers.aws]\nendpoint_url = "{endpoint}"\nregions = ["{REGION}"]\n'
        'ssh_cidr = "203.0.113.7/32"\nimage_owners = ["self"]\npoll_s = 0\n' + extra
    )


def owned(moto_url: str, owner: str) -> list[str]:
    """Everything on the account carrying ``owner``'s tag: instances (not terminated),
    security groups, key pairs."""
    ec2 = ec2_client(moto_url)
    f = [{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}]
    live = [
        i["InstanceId"]
        for r in ec2.describe_instances(Filters=f)["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]
    groups = [g["GroupId"] for g in ec2.describe_security_groups(Filters=f)["SecurityGroups"]]
    keys = [k["KeyName"] for k in ec2.describe_key_pairs(Filters=f)["KeyPairs"]]
    return live + groups + keys


def dead_pid() -> int:
    """The pid of a process that has exited: a client killed with -9."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def recorded_job(s: Store, job: str, rec_id: str, state: str, pid: int) -> dict[str, str]:
    """A job of this host in ``s`` (``state``, its client ``pid``) with one g5.xlarge
    instance record, requested while provisioning, running after: the tags its launch
    puts on what it creates. The lease is fresh: it is the store that says whether the
    client is alive."""
    s.add_job(job, job, {}, state=state)
    s.update_job(job, pid=pid, host=socket.gethostname())
    now = int(time.time())
    tags = {
        TAG_JOB: job,
        TAG_OWNER: s.owner_id(),
        TAG_EXPIRES: str(now + 3600),
        TAG_LEASE: str(now + 600),
        TAG_INSTANCE: rec_id,
    }
    record_state = "requested" if state == "provisioning" else "running"
    s.add_instance(
        InstanceRecord(id=rec_id, job_id=job, provider="aws", state=record_state,
                       instance_type="g5.xlarge", region=REGION, tags=tags)
    )  # fmt: skip
    return tags
