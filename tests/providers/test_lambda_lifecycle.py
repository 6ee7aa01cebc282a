"""`cloudgpu launch` on Lambda end to end: the plan picks a Lambda offer from the bundled
catalog, the provider registers the job's key and launches through the loopback REST
fake, and the job runs over SSH on a real loopback sshd standing in for the VM.

No test-only branch anywhere: the provider is configured as a user would (``api_url``,
``ssh_user``, ``ssh_port`` as for a port forward, ``scratch_dir``); the fake reports the
sshd's address as the instance's IP and authorizes the launch key the way Lambda's
cloud-init does.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.lambda_cloud import LambdaProvider

from cloudgpu.paths import default_paths
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    InstanceState,
    ProviderContext,
)
from tests.lifecycle.helpers import cli_proc, store
from tests.providers.conftest import ApiLaunch
from tests.providers.lifecycle_kit import (
    launch_fails_cleanly,
    launch_in_subprocess,
    launch_job,
    launch_succeeds,
    machines_on,
)
from tests.remote.sshd import SSHDServer

# `lambda` is a keyword, so the fixture folder can't appear in an import statement.
FakeLambda = importlib.import_module("tests.fixtures.lambda.server").FakeLambda

pytestmark = pytest.mark.slow

JOB = launch_job("lambda-life", "A10", "lambda")


@pytest.fixture
def fake(sshd: SSHDServer) -> Iterator[Any]:
    with machines_on(FakeLambda(), sshd, report_port=False) as server:
        yield server


@pytest.fixture
def configured(fake: Any, sshd: SSHDServer, api_launch: ApiLaunch) -> Path:
    return api_launch(
        fake, "lambda", "api_url", "LAMBDA_API_KEY", JOB, extra=f"ssh_port = {sshd.port}\n"
    )


def test_launch_runs_on_a_lambda_vm_and_terminates_it(
    configured: Path, fake: Any, cloudgpu_home: Path
) -> None:
    job, _, out = launch_succeeds(configured, cloudgpu_home, "lambda")
    assert "scratch ok" in out
    launches = [r for r in fake.requests if r["path"] == "/instance-operations/launch"]
    assert len(launches) == 1
    assert launches[0]["body"]["instance_type_name"] == "gpu_1x_a10"
    assert launches[0]["body"]["name"].startswith(f"cg.{job.id}.")
    assert fake.instances == {}  # torn down and verified gone


def test_launch_as_subprocess(configured: Path, fake: Any, cloudgpu_home: Path) -> None:
    env = {"LAMBDA_API_KEY": fake.api_key}
    launch_in_subprocess(configured, cloudgpu_home, env, fake.api_key)
    assert fake.instances == {}


def test_no_capacity_anywhere_fails_cleanly(configured: Path, fake: Any) -> None:
    fake.capacity = False
    launch_fails_cleanly(configured)
    assert fake.instances == {}


def test_down_orphans_removes_our_left_over_instance_only(
    configured: Path, fake: Any, cloudgpu_home: Path
) -> None:
    """As if a client crashed right after create: instances named for jobs the store never
    recorded. Ours (owner digest matches) is terminated; another owner's is kept."""
    paths = default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)})
    provider = LambdaProvider(
        ProviderContext(
            config={"api_url": fake.base_url, "poll_s": 0},
            paths=paths,
            env={"LAMBDA_API_KEY": fake.api_key},
        )
    )
    offer = next(o for o in provider.fetch_offers() if o.instance_type == "gpu_1x_a10")
    expires = str(int(time.time()) + 600)
    ours, theirs = (
        provider.create(
            CreateRequest(
                offer=offer,
                name=job,
                tags={TAG_JOB: job, TAG_OWNER: who, TAG_EXPIRES: expires},
                idempotency_token=job,
            )
        )
        for job, who in (
            ("crashed-1", store(cloudgpu_home).owner_id()),
            ("crashed-2", "someone@elsewhere"),
        )
    )
    res = cli_proc(
        ["down", "--orphans", "--yes", "--force"],
        cloudgpu_home,
        env={"LAMBDA_API_KEY": fake.api_key},
    )
    assert res.returncode == 0, res.stderr
    assert ours.id in res.stdout and "crashed-1" in res.stdout
    assert provider.describe(ours.id).state.is_gone
    assert provider.describe(theirs.id).state != InstanceState.TERMINATED
    provider.terminate(theirs.id)
