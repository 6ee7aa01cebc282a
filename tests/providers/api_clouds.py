"""The API-key clouds (Lambda, RunPod, Vast) as data, for the suites every one of them
passes: `cloudgpu launch` end to end (tests/providers/test_api_clouds_lifecycle.py) and
`catalog refresh` / `check --verify` (tests/providers/test_api_clouds_refresh.py).

Each :class:`Cloud` names what differs: its loopback fake, the config key of its API
address, its key's variable, a job its bundled catalog can place, and what its own API
must have been sent. The tests themselves are written once.

No test-only branch anywhere: each fake reports the loopback sshd's address the way the
cloud reports a machine's (Lambda: the VM's IP, with ``ssh_port`` configured as for a
port forward; RunPod: ``runtime.ports``; Vast: ``ssh_host``/``ssh_port``) and authorizes
the launch key the way its boot does (cloud-init, the image's start script, the SSH
runtype).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.fixtures.runpod.server import FakeRunPod
from tests.fixtures.vast.server import FakeVast
from tests.providers.lifecycle_kit import launch_job

# `lambda` is a keyword, so the fixture folder can't appear in an import statement.
FakeLambda = importlib.import_module("tests.fixtures.lambda.server").FakeLambda


def _no_capacity(fake: Any) -> None:
    fake.capacity = False


def _instances(fake: Any) -> Mapping[Any, Any]:
    return fake.instances  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Cloud:
    """One cloud's differences; the defaults are what most of the three share."""

    name: str  # the provider's name, and its [providers.NAME] table
    fake: Callable[[], Any]  # its loopback API fake (not started)
    key_env: str  # the variable its API key is read from
    job: str  # a job its bundled catalog can place
    sent: Callable[[Any, str], None]  # checks what one launch of job id sent its API
    refreshed: Callable[[list[dict[str, Any]]], None]  # checks the offers after a refresh
    rotated_key: str  # a well-formed key the fake no longer accepts
    verify_call: Callable[[Any], bool]  # check --verify made its one cheap call
    url_key: str = "api_url"  # the config key of its API address
    report_port: bool = True  # the fake reports the machine's SSH port (else config ssh_port)
    no_capacity: Callable[[Any], None] = _no_capacity  # the fake has no machine for the job
    machines: Callable[[Any], Mapping[Any, Any]] = _instances  # what the fake still bills for
    refreshed_query: tuple[str, ...] = ("--gpu", "RTX4090")  # the offers to list after refresh


def _lambda_sent(fake: Any, job_id: str) -> None:
    launches = [r for r in fake.requests if r["path"] == "/instance-operations/launch"]
    assert len(launches) == 1
    assert launches[0]["body"]["instance_type_name"] == "gpu_1x_a10"
    assert launches[0]["body"]["name"].startswith(f"cg.{job_id}.")


def _lambda_refreshed(rows: list[dict[str, Any]]) -> None:
    assert {(r["instance_type"], r["region"]) for r in rows} >= {
        ("gpu_1x_a10", "us-east-1"),
        ("gpu_8x_a100_80gb_sxm4", "us-east-1"),
    }
    # The live list replaced the snapshot: only types with capacity now remain.
    assert not any(r["instance_type"] == "gpu_8x_v100" for r in rows)
    assert all(r["market"] == "on_demand" for r in rows)


def _runpod_sent(fake: Any, job_id: str) -> None:
    deploys = [r for r in fake.requests if r["operation"] == "podFindAndDeployOnDemand"]
    assert len(deploys) == 1
    sent = deploys[0]["variables"]["input"]
    assert sent["gpuTypeId"] == "NVIDIA GeForce RTX 4090"
    assert 'runpodctl remove pod "$RUNPOD_POD_ID"' in sent["dockerArgs"]  # deadline armed


def _runpod_refreshed(rows: list[dict[str, Any]]) -> None:
    assert rows and {r["instance_type"] for r in rows} >= {
        "1x_RTX4090_SECURE",
        "2x_RTX4090_COMMUNITY",
    }
    assert all(r["region"] == "global" and r["market"] == "on_demand" for r in rows)


def _vast_sent(fake: Any, job_id: str) -> None:
    rents = [r for r in fake.requests if r["method"] == "PUT"]
    assert [r["path"] for r in rents] == ["/asks/20000001/"]  # the Romanian 4x A6000 ask
    assert "$CONTAINER_API_KEY" in rents[0]["body"]["onstart"]  # deadline armed
    assert fake.rented == set()


def _vast_refreshed(rows: list[dict[str, Any]]) -> None:
    assert {(r["instance_type"], r["market"]) for r in rows} == {
        ("1x-RTX_4090-16-64305", "on_demand"),
        ("1x-RTX_4090-16-64305", "spot"),
    }
    assert all(r["region"] == "Quebec, CA" for r in rows)


def _all_rented(fake: Any) -> None:
    fake.rented = set(fake.asks)  # every machine rented by someone else


CLOUDS = [
    Cloud(
        name="lambda",
        fake=FakeLambda,
        key_env="LAMBDA_API_KEY",
        job=launch_job("lambda-life", "A10", "lambda"),
        sent=_lambda_sent,
        refreshed=_lambda_refreshed,
        rotated_key="secret_ROTATED_000000000000000000",
        verify_call=lambda fake: "GET /ssh-keys" in fake.calls(),
        report_port=False,
        refreshed_query=(),
    ),
    Cloud(
        name="runpod",
        fake=FakeRunPod,
        key_env="RUNPOD_API_KEY",
        job=launch_job("rp-life", "RTX4090", "runpod"),
        sent=_runpod_sent,
        refreshed=_runpod_refreshed,
        rotated_key="rpa_ROTATEDKEY00000000000000000000000",
        verify_call=lambda fake: "myself" in [r["operation"] for r in fake.requests],
        url_key="api_base_url",
        machines=lambda fake: fake.pods,
    ),
    Cloud(
        name="vast",
        fake=FakeVast,
        key_env="VAST_API_KEY",
        job=launch_job("vast-life", "RTXA6000:4", "vast"),
        sent=_vast_sent,
        refreshed=_vast_refreshed,
        rotated_key="ROTATEDKEY000000000000",
        verify_call=lambda fake: "GET /users/current/" in fake.calls(),
        no_capacity=_all_rented,
    ),
]
IDS = [c.name for c in CLOUDS]


def offers_json(out: str) -> list[dict[str, Any]]:
    rows = json.loads(out)
    assert isinstance(rows, list)
    return rows
