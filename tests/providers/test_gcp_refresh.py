"""`cloudgpu catalog refresh --provider gcp` through the real SDKs against the loopback
Compute/Billing fake: paged machine types and SKUs become cached offers; an auth failure
leaves the cache untouched; `check --verify` makes its one cheap call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudgpu.paths import Paths
from tests.fixtures.gcp.server import FakeGCP
from tests.lifecycle.helpers import cli_proc, main_exit
from tests.providers.gcp_kit import fake

__all__ = ["fake"]  # the fixture, imported for pytest


@pytest.fixture
def configured(fake: FakeGCP, paths: Paths) -> Paths:
    paths.config_file.write_text(
        f'[providers.gcp]\nproject = "{fake.project}"\nanonymous = true\n'
        f'endpoint_url = "{fake.endpoint}"\nbackoff_s = 0\n'
    )
    return paths


def cache(paths: Paths) -> Path:
    return paths.catalog_cache / "gcp.json"


def test_refresh_replaces_the_snapshot(configured: Paths, fake: FakeGCP) -> None:
    fake.fail_next = [("GET", "/v1/services/", "error_backend")]  # a 503 first: retried
    code, out, err = main_exit(["catalog", "refresh", "--provider", "gcp"])
    assert code == 0, err
    assert "refreshed" in out and cache(configured).exists()
    code, out, _ = main_exit(["offers", "--provider", "gcp", "--gpu", "L4", "--json"])
    rows = json.loads(out)
    # Spot first (cheaper): its price comes from "Nvidia L4 GPU attached to Spot
    # Preemptible VMs running in Americas", the wording a live catalog uses.
    assert [(r["instance_type"], r["zone"], r["market"]) for r in rows] == [
        ("g2-standard-8", "us-central1-c", "spot"),
        ("g2-standard-8", "us-central1-c", "on_demand"),
    ]


def test_auth_failure_leaves_the_cache_alone(configured: Paths, fake: FakeGCP) -> None:
    assert main_exit(["catalog", "refresh", "--provider", "gcp"])[0] == 0
    before = cache(configured).read_bytes()
    fake.fail_next = [("GET", "aggregated/machineTypes", "error_unauthorized")]
    code, out, err = main_exit(["catalog", "refresh", "--provider", "gcp"])
    assert code != 0
    # On a 401 google-auth tries to refresh the credentials; anonymous ones cannot be.
    assert "credentials refused" in out + err and "cache left unchanged" in out + err
    assert "application-default login" in out + err
    assert "Traceback" not in err
    assert cache(configured).read_bytes() == before


def test_refresh_as_subprocess(configured: Paths, cloudgpu_home: Path) -> None:
    res = cli_proc(["catalog", "refresh", "--provider", "gcp"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    assert "refreshed" in res.stdout


def test_check_verify_makes_one_call(configured: Paths, fake: FakeGCP) -> None:
    _code, out, _err = main_exit(["check", "--verify"])
    line = next(line for line in out.splitlines() if line.startswith("gcp"))
    assert "enabled" in line and "project test-project" in line
    assert fake.requests == [("GET", "/compute/v1/projects/test-project/zones")]
