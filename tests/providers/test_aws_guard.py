"""Nothing leaks on AWS and nobody else's machine is touched, on moto's EC2.

A create killed between its key pair / security group and run_instances leaves both
behind: `down --orphans` finds them by tag and removes them. Two CLOUDGPU_HOMEs on one
account (the same user and host) each have their own owner id: neither sweep sees, let
alone removes, what the other launched, and a live lease keeps an instance whose job
this store cannot see. The lease tag moves while a client holds the instance.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from cloudgpu_providers.aws import AWSProvider, launch

from cloudgpu.paths import Paths, default_paths
from cloudgpu.provider import TAG_EXPIRES, TAG_JOB, TAG_LEASE, TAG_OWNER, CreateRequest
from tests.lifecycle.helpers import cli_proc, store
from tests.providers.aws_fixtures.account import (
    config_toml,
    dead_pid,
    ec2_url,
    moto_url,
    owned,
    recorded_job,
)
from tests.providers.aws_fixtures.setup import FAKE_ENV, REGION, make_provider, offer

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest


def configure(home: Path, ec2_url: str) -> Paths:
    paths = default_paths({"CLOUDGPU_HOME": str(home)}).ensure()
    paths.config_file.write_text(config_toml(ec2_url, "[providers.local]\nenabled = false\n"))
    return paths


def crashed_job(home: Path, job: str) -> dict[str, str]:
    """A job whose client died (kill -9): its record, and the tags it put on things."""
    return recorded_job(store(home), job, f"i-{job[-10:]}", "provisioning", dead_pid())


def provider(moto_url: str, paths: Paths, tmp_path: Path) -> AWSProvider:
    return make_provider(moto_url, paths, str(tmp_path))


def test_a_create_killed_before_run_instances_leaks_nothing_after_orphans(
    moto_url: str, ec2_url: str, cloudgpu_home: Path, tmp_path: Path
) -> None:
    paths = configure(cloudgpu_home, ec2_url)
    tags = crashed_job(cloudgpu_home, "killed-mid-create-0001")
    prov = provider(ec2_url, paths, tmp_path)
    ec2 = prov.clients.ec2(REGION)
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    name = launch.resource_name("killed-mid-create-0001-abcdef")
    pub = tmp_path / "k.pub"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")],
                   check=True)  # fmt: skip
    launch.ensure_key_pair(prov.call, ec2, name, pub.read_text(), tags)
    launch.ensure_security_group(prov.call, ec2, name, "203.0.113.7/32", tags, vpc)
    # ... and there the client was killed: no instance, but a group and a key pair.
    assert len(owned(moto_url, tags[TAG_OWNER])) == 2
    res = cli_proc(["down", "--orphans"], cloudgpu_home, env=dict(FAKE_ENV))
    assert res.returncode == 2 and "confirm with --yes" in res.stderr  # asks first
    assert "security group" in res.stderr and "key pair" in res.stderr  # says what
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home, env=dict(FAKE_ENV))
    assert res.returncode == 0, res.stderr
    assert "security group" in res.stdout and f"key pair {name}" in res.stdout
    assert owned(moto_url, tags[TAG_OWNER]) == []
    assert store(cloudgpu_home).job("killed-mid-create-0001").state == "failed"


def test_two_homes_on_one_account_never_touch_each_other(
    moto_url: str, ec2_url: str, tmp_path: Path
) -> None:
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    paths_a, paths_b = configure(home_a, ec2_url), configure(home_b, ec2_url)
    owner_a, owner_b = store(home_a).owner_id(), store(home_b).owner_id()
    assert owner_a != owner_b  # same user, same host: two stores, two owners
    # Home A: a job whose client died (an orphan of A). Home B: a job running now.
    tags_a = crashed_job(home_a, "a-crashed-0001")
    tags_b = crashed_job(home_b, "b-running-0001")
    store(home_b).update_job("b-running-0001", state="running", pid=os.getpid())
    pa, pb = provider(ec2_url, paths_a, tmp_path), provider(ec2_url, paths_b, tmp_path)
    inst_a = pa.create(CreateRequest(offer=offer(), name="a-crashed-0001-x", tags=tags_a))
    inst_b = pb.create(CreateRequest(offer=offer(), name="b-running-0001-x", tags=tags_b))
    res = cli_proc(["down", "--orphans", "--yes"], home_b, env=dict(FAKE_ENV))
    assert res.returncode == 0, res.stderr
    assert "0 orphan(s) removed" in res.stdout  # B's job is live; A's is not B's to touch
    assert inst_a.id not in res.stdout + res.stderr
    assert not pa.describe(inst_a.id).state.is_gone
    res = cli_proc(["down", "--orphans", "--yes"], home_a, env=dict(FAKE_ENV))
    assert res.returncode == 0, res.stderr
    assert inst_a.id in res.stdout
    assert owned(moto_url, owner_a) == []
    assert not pb.describe(inst_b.id).state.is_gone  # B's running instance survived both
    assert len([x for x in owned(moto_url, owner_b) if x.startswith("i-")]) == 1
    pb.terminate(inst_b.id)
    assert owned(moto_url, owner_b) == []


def test_a_fresh_lease_keeps_an_instance_this_store_cannot_see(
    moto_url: str, ec2_url: str, cloudgpu_home: Path, tmp_path: Path
) -> None:
    # The same home used from another host (or a copied one): the job is not in this
    # store, but its client renews the lease. Left alone unless --force.
    paths = configure(cloudgpu_home, ec2_url)
    prov = provider(ec2_url, paths, tmp_path)
    now = int(time.time())
    tags = {
        TAG_JOB: "elsewhere-0001",
        TAG_OWNER: store(cloudgpu_home).owner_id(),
        TAG_EXPIRES: str(now + 3600),
        TAG_LEASE: str(now + 600),
    }
    inst = prov.create(CreateRequest(offer=offer(), name="elsewhere-0001-x", tags=tags))
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home, env=dict(FAKE_ENV))
    assert res.returncode == 0 and "0 orphan(s) removed" in res.stdout
    assert "lease is held until" in res.stderr and "--force" in res.stderr
    assert not prov.describe(inst.id).state.is_gone
    assert prov.renew_lease(inst, now - 1)  # the client stopped renewing: it ran out
    assert prov.describe(inst.id).tags[TAG_LEASE] == str(now - 1)
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home, env=dict(FAKE_ENV))
    assert res.returncode == 0 and inst.id in res.stdout, res.stderr
    assert owned(moto_url, tags[TAG_OWNER]) == []
