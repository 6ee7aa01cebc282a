"""The example provider, as installed: found through its entry point, doing what the
contract says, and running a real job under `cloudgpu launch`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cloudgpu_scratch import ScratchProvider

from cloudgpu.config import Config
from cloudgpu.errors import CapacityError
from cloudgpu.paths import default_paths
from cloudgpu.provider import TAG_JOB, CreateRequest, InstanceState, Provider
from cloudgpu.registry import Registry


def provider_in(home: Path, **config: object) -> Provider:
    paths = default_paths({"CLOUDGPU_HOME": str(home)})
    data = {"providers": {"scratch": {"enabled": True, **config}}}
    return Registry(Config(data), paths, {}).get("scratch")  # through the entry point


def request(p: Provider, job: str, token: str = "") -> CreateRequest:
    return CreateRequest(
        offer=p.offers()[0], name=job, tags={TAG_JOB: job}, idempotency_token=token
    )


def test_registered_through_the_entry_point(tmp_path: Path) -> None:
    p = provider_in(tmp_path)
    assert isinstance(p, ScratchProvider) and p.availability().enabled
    assert (
        not Registry(Config({}), default_paths({"CLOUDGPU_HOME": str(tmp_path)}), {})
        .get("scratch")
        .availability()
        .enabled
    )  # opt-in


def test_lifecycle_capacity_and_idempotency(tmp_path: Path) -> None:
    p = provider_in(tmp_path, slots=1)
    first = p.create(request(p, "j1", token="t1"))
    assert p.create(request(p, "j1", token="t1")).id == first.id  # a retried create
    with pytest.raises(CapacityError):
        p.create(request(p, "j2"))
    assert [i.id for i in p.list_instances({TAG_JOB: "j1"})] == [first.id]
    p.terminate(first.id)
    p.terminate(first.id)  # idempotent
    assert p.describe(first.id).state == InstanceState.TERMINATED
    assert p.list_instances({}) == []


def test_cloudgpu_launch_runs_a_job_on_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(
        "[providers.local]\nenabled = false\n\n[providers.scratch]\nenabled = true\n"
    )
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: on-scratch\nresources: {providers: [scratch]}\n"
        "run: echo hello > $CLOUDGPU_NVME/out.txt && cat $CLOUDGPU_NVME/out.txt\n"
    )
    env = {**os.environ, "CLOUDGPU_HOME": str(home)}
    run = [sys.executable, "-m", "cloudgpu"]
    offers = subprocess.run(
        [*run, "offers", "--provider", "scratch", "--json"], env=env, capture_output=True,
        text=True, check=False, timeout=120,
    )  # fmt: skip
    assert offers.returncode == 0, offers.stderr
    assert json.loads(offers.stdout)[0]["instance_type"] == "scratch.small"
    started = time.time()
    done = subprocess.run(
        [*run, "launch", str(job), "--yes", "--json"], env=env, capture_output=True, text=True,
        check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["provider"] == "scratch" and doc["state"] == "succeeded"
    assert "hello" in done.stderr  # the job's output (stdout is the JSON document)
    # $0.10/h, billed per started second (Capabilities' default granularity); the JSON
    # gives dollars to 6 decimal places
    assert 0 < doc["cost"] <= round(0.1 * math.ceil(time.time() - started) / 3600, 6) + 1e-9
    assert list((home / "data" / "scratch").iterdir()) == []  # torn down
