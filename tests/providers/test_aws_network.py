"""AWS in an account without a default VPC, on moto's server with the default VPC
deleted: run_instances without a subnet fails there (VPCIdNotSpecified), so the
provider picks a subnet in the offer's zone itself, takes `subnet_id` / `vpc_id` from
the config, and where nothing fits fails over to the next offer with the reason."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.aws import AWSProvider

from cloudgpu.errors import CapacityError, ConfigError
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import provision
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_EXPIRES, TAG_JOB, TAG_OWNER, CreateRequest
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import Store
from tests.lifecycle.helpers import Lines
from tests.providers.aws_fixtures.account import ec2_url, moto_url
from tests.providers.aws_fixtures.setup import ec2_client, make_provider, offer

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest


def _drop_default_vpc(ec2: Any) -> None:
    """What an account owner does with `aws ec2 delete-vpc` on the default VPC."""
    for vpc in ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]:
        vid = vpc["VpcId"]
        for sn in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vid]}])["Subnets"]:
            ec2.delete_subnet(SubnetId=sn["SubnetId"])
        flt = [{"Name": "attachment.vpc-id", "Values": [vid]}]
        for gw in ec2.describe_internet_gateways(Filters=flt)["InternetGateways"]:
            ec2.detach_internet_gateway(InternetGatewayId=gw["InternetGatewayId"], VpcId=vid)
            ec2.delete_internet_gateway(InternetGatewayId=gw["InternetGatewayId"])
        ec2.delete_vpc(VpcId=vid)


def _subnet(ec2: Any, vpc: str, cidr: str, zone: str, public: bool) -> str:
    sid = str(
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
    )
    ec2.modify_subnet_attribute(SubnetId=sid, MapPublicIpOnLaunch={"Value": public})
    return sid


@pytest.fixture(scope="module")
def world(ec2_url: str) -> dict[str, str]:
    """moto without a default VPC; one VPC with a public subnet in us-east-1b and a
    private one in us-east-1a."""
    ec2 = ec2_client(ec2_url)
    _drop_default_vpc(ec2)
    vpc = str(ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"])
    return {
        "url": ec2_url,
        "vpc": vpc,
        "public_b": _subnet(ec2, vpc, "10.20.2.0/24", "us-east-1b", public=True),
        "private_a": _subnet(ec2, vpc, "10.20.1.0/24", "us-east-1a", public=False),
    }


def _provider(world: dict[str, str], paths: Paths, tmp_path: Path, **cfg: Any) -> AWSProvider:
    return make_provider(world["url"], paths, str(tmp_path), **cfg)


def _request(zone: str) -> CreateRequest:
    job = f"t-{uuid.uuid4().hex[:8]}"
    return CreateRequest(
        offer=offer(zone=zone),
        name=job,
        tags={TAG_JOB: job, TAG_OWNER: "tester", TAG_EXPIRES: str(int(time.time()) + 3600)},
        idempotency_token=uuid.uuid4().hex,
    )


def _raw(world: dict[str, str], instance_id: str) -> dict[str, Any]:
    out = ec2_client(world["url"]).describe_instances(InstanceIds=[instance_id])
    return dict(out["Reservations"][0]["Instances"][0])


def _groups_named(world: dict[str, str], name: str) -> list[dict[str, Any]]:
    flt = [{"Name": "group-name", "Values": [f"cloudgpu-{name}"]}]
    return list(ec2_client(world["url"]).describe_security_groups(Filters=flt)["SecurityGroups"])


def test_no_default_vpc_uses_the_zones_public_subnet(
    world: dict[str, str], paths: Paths, tmp_path: Path
) -> None:
    provider = _provider(world, paths, tmp_path)
    req = _request("us-east-1b")
    inst = provider.create(req)
    try:
        raw = _raw(world, inst.id)
        assert raw["SubnetId"] == world["public_b"] and raw["VpcId"] == world["vpc"]
        (group,) = _groups_named(world, req.name)
        assert group["VpcId"] == world["vpc"]  # made in that VPC, not the missing default
    finally:
        provider.terminate(inst.id)


def test_no_usable_subnet_fails_over_with_the_reason_and_leaves_nothing(
    world: dict[str, str], paths: Paths, tmp_path: Path
) -> None:
    provider = _provider(world, paths, tmp_path)
    req = _request("us-east-1a")  # only a private subnet there
    with pytest.raises(CapacityError, match="no default VPC") as err:
        provider.create(req)
    assert "us-east-1a" in str(err.value) and "subnet_id" in (err.value.hint or "")
    assert _groups_named(world, req.name) == []  # refused before anything was made
    keys = ec2_client(world["url"]).describe_key_pairs()["KeyPairs"]
    assert not [k for k in keys if k["KeyName"] == f"cloudgpu-{req.name}"]


def test_configured_subnet_gets_a_public_address_when_it_maps_none(
    world: dict[str, str], paths: Paths, tmp_path: Path
) -> None:
    provider = _provider(world, paths, tmp_path, subnet_id=[world["public_b"], world["private_a"]])
    inst = provider.create(_request("us-east-1a"))
    try:
        raw = _raw(world, inst.id)
        assert raw["SubnetId"] == world["private_a"]
        assert raw.get("PublicIpAddress")  # asked for on the interface
    finally:
        provider.terminate(inst.id)


def test_configured_vpc_and_subnet_ids_are_checked(
    world: dict[str, str], paths: Paths, tmp_path: Path
) -> None:
    provider = _provider(world, paths, tmp_path, vpc_id=world["vpc"])
    inst = provider.create(_request("us-east-1a"))
    try:
        assert _raw(world, inst.id)["SubnetId"] == world["private_a"]
    finally:
        provider.terminate(inst.id)
    only_b = _provider(world, paths, tmp_path, subnet_id=world["public_b"])
    with pytest.raises(CapacityError, match=r"none of providers\.aws\.subnet_id"):
        only_b.create(_request("us-east-1a"))
    with pytest.raises(ConfigError, match="subnet_id"):
        _provider(world, paths, tmp_path, subnet_id="10.0.0.0/24")


def test_the_lifecycle_fails_over_to_the_zone_with_a_subnet(
    world: dict[str, str], paths: Paths, tmp_path: Path
) -> None:
    provider = _provider(world, paths, tmp_path)
    store = Store.open(tmp_path / "state.db")
    sink = Lines()
    deps = Deps(store, lambda _: provider, paths, sink, "tester", connect=lambda *a, **k: None)
    store.add_job("j-1", "j", {}, spec_path="", log_path="", state="provisioning")
    first, second = offer(zone="us-east-1a"), replace(offer(zone="us-east-1b"), price_per_hour=2.0)
    got = provision(
        deps,
        "j-1",
        JobSpec(name="j"),
        [first, second],
        public_key="",
        deadline=lambda _: time.time() + 3600,
        excluded=set(),
    )
    try:
        assert got.offer == second
        assert any("not available" in ln and "no default VPC" in ln for ln in sink.lines)
    finally:
        provider.terminate(got.instance.id)
