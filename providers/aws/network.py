"""Where an EC2 instance goes on the network: one subnet in the offer's zone, and its VPC.

An account may have no default VPC (deleted, or an organisation that never makes one):
then run_instances without a subnet fails with VPCIdNotSpecified and a security group
made without a VpcId is refused too. So the subnet is always chosen explicitly:

* ``subnet_id`` in the config (one id or a list, any regions): the one in the offer's
  zone; none there -> CapacityError (the lifecycle fails over to the next offer).
* ``vpc_id`` (one or a list): a subnet of that VPC in the zone, preferring one that maps
  public addresses; without one the instance asks for a public address itself, unless
  ``use_private_ip`` (a VPN or bastion reaches it).
* neither: the zone's default subnet (the default VPC); without a default VPC, a subnet
  in the zone that maps public addresses (a public subnet); none -> CapacityError saying
  so and how to choose one.

Pure choice over describe_subnets; nothing is created here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cloudgpu_providers.aws.faults import PROVIDER, Caller
from cloudgpu_providers.aws.settings import AwsSettings

from cloudgpu.errors import CapacityError

HINT = 'set providers.aws.subnet_id = ["subnet-..."] (one per zone) or vpc_id = "vpc-..."'


@dataclass(frozen=True)
class Network:
    vpc_id: str
    subnet_id: str
    zone: str
    maps_public_ip: bool  # the subnet gives its instances a public address itself


def _subnets(call: Caller, ec2: Any, filters: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    pages = call.pages("describe_subnets", ec2.describe_subnets, "NextToken", Filters=filters)
    found = [s for page in pages for s in page.get("Subnets", [])]
    # The same choice on every call, whatever order EC2 lists them in.
    return sorted(found, key=lambda s: (s.get("VpcId", ""), s.get("SubnetId", "")))


def _network(subnet: Mapping[str, Any]) -> Network:
    return Network(
        vpc_id=str(subnet["VpcId"]),
        subnet_id=str(subnet["SubnetId"]),
        zone=str(subnet.get("AvailabilityZone", "")),
        maps_public_ip=bool(subnet.get("MapPublicIpOnLaunch")),
    )


def _where(zone: str, region: str) -> str:
    return f"zone {zone}" if zone else f"region {region}"


def choose(call: Caller, ec2: Any, settings: AwsSettings, zone: str, region: str) -> Network:
    """The subnet (and VPC) for an instance in ``zone`` (a zone name; '' = any)."""
    in_zone = [{"Name": "availability-zone", "Values": [zone]}] if zone else []
    if settings.subnet_ids:
        ids = {"Name": "subnet-id", "Values": list(settings.subnet_ids)}
        found = _subnets(call, ec2, [ids, *in_zone])
        if not found:
            raise CapacityError(
                f"none of providers.aws.subnet_id ({', '.join(settings.subnet_ids)}) is in "
                f"{_where(zone, region)}",
                provider=PROVIDER,
                hint="add a subnet of that zone to providers.aws.subnet_id",
            )
        return _network(found[0])
    if settings.vpc_ids:
        vpcs = {"Name": "vpc-id", "Values": list(settings.vpc_ids)}
        found = _subnets(call, ec2, [vpcs, *in_zone])
        public = [s for s in found if s.get("MapPublicIpOnLaunch")]
        if public or found:
            return _network((public or found)[0])
        raise CapacityError(
            f"providers.aws.vpc_id ({', '.join(settings.vpc_ids)}) has no subnet in "
            f"{_where(zone, region)}",
            provider=PROVIDER,
            hint=HINT,
        )
    found = _subnets(call, ec2, in_zone)
    default_vpc = {"Name": "is-default", "Values": ["true"]}
    vpcs = call("describe_vpcs", ec2.describe_vpcs, Filters=[default_vpc]).get("Vpcs", [])
    defaults = {v.get("VpcId") for v in vpcs}
    # A zone's default subnet is the one of the default VPC flagged DefaultForAz.
    default = [s for s in found if s.get("DefaultForAz") and s.get("VpcId") in defaults]
    usable = default or [s for s in found if s.get("MapPublicIpOnLaunch")]
    if settings.use_private_ip:
        usable = usable or found
    if not usable:
        raise CapacityError(
            f"no default VPC and no subnet that gives public addresses in {_where(zone, region)}",
            provider=PROVIDER,
            hint=HINT,
        )
    return _network(usable[0])


def placement_args(network: Network, group_id: str, settings: AwsSettings) -> dict[str, Any]:
    """The run_instances arguments that put the instance into ``network``: the subnet and
    group directly, or, where the subnet maps no public address and SSH goes to the
    public one, an interface that asks for one (then the groups live on the interface)."""
    # The zone is the subnet's; naming it too is allowed and keeps requests readable.
    zone = {"Placement": {"AvailabilityZone": network.zone}} if network.zone else {}
    if network.maps_public_ip or settings.use_private_ip:
        return {"SubnetId": network.subnet_id, "SecurityGroupIds": [group_id], **zone}
    return {
        **zone,
        "NetworkInterfaces": [
            {
                "DeviceIndex": 0,
                "SubnetId": network.subnet_id,
                "Groups": [group_id],
                "AssociatePublicIpAddress": True,
                "DeleteOnTermination": True,
            }
        ],
    }
