"""`cloudgpu launch` on Vast.ai end to end: the plan picks a Vast offer from the bundled
catalog, the provider matches it to an ask listed now, rents it and attaches the job's
key through the loopback REST fake, and the job runs over SSH on a real loopback sshd
standing in for the container.

No test-only branch anywhere: Vast itself reports a container's SSH address as a host
and port (``ssh_host`` / ``ssh_port``), so the fake reports the sshd's, and it authorizes
attached keys the way Vast's SSH runtype does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.vast.server import FakeVast
from tests.providers.conftest import ApiLaunch
from tests.providers.lifecycle_kit import (
    launch_fails_cleanly,
    launch_in_subprocess,
    launch_job,
    launch_succeeds,
    machines_on,
)
from tests.remote.sshd import SSHDServer

pytestmark = pytest.mark.slow

JOB = launch_job("vast-life", "RTXA6000:4", "vast")


@pytest.fixture
def fake(sshd: SSHDServer) -> Iterator[FakeVast]:
    with machines_on(FakeVast(), sshd) as server:
        yield server


@pytest.fixture
def configured(fake: FakeVast, api_launch: ApiLaunch) -> Path:
    return api_launch(fake, "vast", "api_url", "VAST_API_KEY", JOB)


def test_launch_runs_on_a_vast_container_and_destroys_it(
    configured: Path, fake: FakeVast, cloudgpu_home: Path
) -> None:
    _, _, out = launch_succeeds(configured, cloudgpu_home, "vast")
    assert "scratch ok" in out
    rents = [r for r in fake.requests if r["method"] == "PUT"]
    assert [r["path"] for r in rents] == ["/asks/20000001/"]  # the Romanian 4x A6000 ask
    assert "$CONTAINER_API_KEY" in rents[0]["body"]["onstart"]  # deadline armed
    assert fake.instances == {} and fake.rented == set()


def test_launch_as_subprocess(configured: Path, fake: FakeVast, cloudgpu_home: Path) -> None:
    env = {"VAST_API_KEY": fake.api_key}
    launch_in_subprocess(configured, cloudgpu_home, env, fake.api_key)
    assert fake.instances == {}


def test_offer_taken_everywhere_fails_cleanly(configured: Path, fake: FakeVast) -> None:
    fake.rented = set(fake.asks)  # every machine rented by someone else
    launch_fails_cleanly(configured)
    assert fake.instances == {}
