"""The CLI commands that reach the AWS provider, run as a user would, against moto and
the Price List replay: `check`, `catalog refresh --provider aws`, `down --orphans`, and a
`launch` that fails over past InsufficientInstanceCapacity."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cloudgpu.paths import Paths, default_paths
from cloudgpu.provider import TAG_EXPIRES, TAG_JOB, TAG_OWNER, CreateRequest
from tests.lifecycle.helpers import cli_proc, invoke, job_file, main_exit, store
from tests.providers.aws_fixtures.account import ec2_url, moto_url
from tests.providers.aws_fixtures.servers import (
    load_products,
    pricing_replay,
    sshd_network,
    url_of,
)
from tests.providers.aws_fixtures.setup import FAKE_ENV, make_provider, offer
from tests.providers.lifecycle_kit import reaped
from tests.remote.sshd import SSHDServer

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest


def _configure(home: Path, body: str) -> Paths:
    paths = default_paths({"CLOUDGPU_HOME": str(home)}).ensure()
    paths.config_file.write_text(body)
    return paths


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k, v in FAKE_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("HOME", str(tmp_path))  # no developer ~/.aws in the picture


def test_check_verify_names_the_source_and_confirms(
    ec2_url: str, cloudgpu_home: Path, creds: None
) -> None:
    _configure(cloudgpu_home, f'[providers.aws]\nendpoint_url = "{ec2_url}"\n')
    res = invoke(["check", "--verify", "--json"])
    (aws,) = [s for s in json.loads(res.output) if s["provider"] == "aws"]
    assert aws["enabled"] and "env:AWS_ACCESS_KEY_ID" in aws["reason"]
    assert "confirmed by STS" in aws["reason"]
    assert FAKE_ENV["AWS_SECRET_ACCESS_KEY"] not in res.output


def test_check_without_credentials_says_why(
    cloudgpu_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    res = invoke(["check"])
    line = next(ln for ln in res.output.splitlines() if ln.startswith("aws"))
    assert "disabled" in line and "no AWS credentials found" in line


def test_catalog_refresh_then_auth_failure_leaves_the_cache(
    ec2_url: str, cloudgpu_home: Path, creds: None
) -> None:
    with pricing_replay(load_products(), page_size=5) as srv:
        paths = _configure(
            cloudgpu_home,
            f'[providers.aws]\nregions = ["us-east-1"]\nendpoint_url = "{ec2_url}"\n'
            f'pricing_endpoint_url = "{url_of(srv)}"\n',
        )
        code, out, err = main_exit(["catalog", "refresh", "--provider", "aws"])
        assert code == 0, err
    cached = sorted(paths.catalog_cache.glob("*aws*"))
    assert cached, "refresh wrote no cache"
    before = [p.read_bytes() for p in cached]
    res = invoke(["offers", "--provider", "aws", "--gpu", "A10G", "--on-demand", "--json"])
    rows = json.loads(res.output)
    assert rows and all(r["provider"] == "aws" for r in rows)
    g5 = [r for r in rows if r["instance_type"] == "g5.xlarge"]
    assert g5 and g5[0]["price_per_hour"] == pytest.approx(1.006)
    assert g5[0]["zone"].startswith("use1-az")
    with pricing_replay(load_products(), faults=[(400, "UnrecognizedClientException")]) as bad:
        _configure(
            cloudgpu_home,
            f'[providers.aws]\nregions = ["us-east-1"]\nendpoint_url = "{ec2_url}"\n'
            f'pricing_endpoint_url = "{url_of(bad)}"\n',
        )
        code, out, err = main_exit(["catalog", "refresh", "--provider", "aws"])
    text = out + err
    assert "UnrecognizedClientException" in text and "Traceback" not in text
    assert [p.read_bytes() for p in sorted(paths.catalog_cache.glob("*aws*"))] == before


def test_down_orphans_removes_a_tagged_instance_no_job_owns(
    ec2_url: str, cloudgpu_home: Path, creds: None, tmp_path: Path
) -> None:
    paths = _configure(
        cloudgpu_home,
        f'[providers.aws]\nendpoint_url = "{ec2_url}"\nssh_cidr = "127.0.0.1/32"\n'
        'image_owners = ["self"]\npoll_s = 0\n',
    )
    # As if a client crashed right after create: an instance tagged for a job the store
    # never recorded. No `regions` configured: the sweep searches every enabled region.
    prov = make_provider(ec2_url, paths, str(tmp_path))
    job = f"crashed-{int(time.time())}"
    tags = {
        TAG_JOB: job,
        TAG_OWNER: store(cloudgpu_home).owner_id(),
        TAG_EXPIRES: str(int(time.time()) + 600),
    }
    inst = prov.create(CreateRequest(offer=offer(), name=job, tags=tags))
    res = cli_proc(["down", "--orphans", "--yes", "--force"], cloudgpu_home, env=dict(FAKE_ENV))
    assert res.returncode == 0, res.stderr
    assert inst.id in res.stdout
    assert prov.describe(inst.id).state.is_gone
    assert prov.list_instances({TAG_JOB: job}) == []


JOB = """\
name: aws-failover
resources:
  gpu: A10G
  spot: false
  providers: [aws]
  regions: [us-east-1]
run: echo "ran on $CLOUDGPU_INSTANCE"
limits:
  max_runtime: 5m
  max_cost: 5
"""


@pytest.mark.slow
def test_launch_fails_over_past_insufficient_capacity(
    ec2_url: str, cloudgpu_home: Path, creds: None, sshd: SSHDServer, tmp_path: Path
) -> None:
    nvme = tmp_path / "instance-nvme"
    with sshd_network(ec2_url, sshd, fail_types=frozenset({"g5.xlarge"})) as proxy:
        _configure(
            cloudgpu_home,
            f'[providers.aws]\nregions = ["us-east-1"]\nendpoint_url = "{url_of(proxy)}"\n'
            f'ssh_cidr = "127.0.0.1/32"\nssh_port = {sshd.port}\nssh_user = "{sshd.user}"\n'
            f'image_owners = ["self"]\nnvme_mount = "{nvme}"\npoll_s = 0\n'
            "[launch]\nssh_timeout = 30\n",
        )
        with reaped(nvme):
            code, out, err = main_exit(["launch", str(job_file(tmp_path, JOB)), "--yes"])
    assert code == 0, err
    assert "InsufficientInstanceCapacity" in out + err  # each failed offer is shown
    assert proxy.refused and all(t == "g5.xlarge" for t, _ in proxy.refused)
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "succeeded"
    used = [i for i in store(cloudgpu_home).instances(rec.id) if i.provider_id]
    assert used and used[-1].instance_type != "g5.xlarge"
