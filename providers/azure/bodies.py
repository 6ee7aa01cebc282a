"""The ARM request bodies for one job's resources, in the REST wire shape.

Pure functions, no SDK and no network: given a :class:`VmPlan` they return the JSON that
``begin_create_or_update`` sends, so the choices are easy to read and test. The Azure
SDK models are MutableMappings over exactly this shape, so the SDK accepts the dicts.

Shapes: https://learn.microsoft.com/rest/api/compute/virtual-machines/create-or-update,
https://learn.microsoft.com/rest/api/virtualnetwork/ (network-security-groups,
virtual-networks, public-ip-addresses, network-interfaces: create-or-update),
https://learn.microsoft.com/azure/templates/microsoft.devtestlab/schedules.

Image rule: the Microsoft Data Science VM "ubuntu-hpc" image (Ubuntu 22.04 with the
NVIDIA driver, CUDA, NCCL and InfiniBand drivers; Gen2, no marketplace plan to accept),
``microsoft-dsvm:ubuntu-hpc:2204:latest``. Override with the job's image or config
``image``: a URN ``publisher:offer:sku:version`` or an image resource id.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cloudgpu.errors import ConfigError

DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
SCHEDULE_API_VERSION = "2018-09-15"
NSG, VNET, SUBNET, IP, NIC, PPG, AVSET = "nsg", "vnet", "default", "ip", "nic", "ppg", "avset"
SUBNET_CIDR = "10.0.0.0/24"


@dataclass(frozen=True)
class VmPlan:
    group: str  # one resource group per job: deleting it deletes everything
    vm_name: str
    location: str
    size: str
    spot: bool
    ssh_public_key: str
    ssh_cidr: str
    tags: dict[str, str] = field(default_factory=dict)
    zone: str = ""
    image: str = DEFAULT_IMAGE
    disk_gb: int = 100
    disk_sku: str = "Premium_LRS"
    admin_user: str = "azureuser"
    user_data: str = ""
    ssh_port: int = 22  # images whose sshd listens elsewhere (config ssh_port)
    # Multi-node jobs: the nodes share the group, so each VM's IP and NIC are named after
    # it; the VM joins the group's proximity placement group.
    ip_name: str = IP
    nic_name: str = NIC
    ppg_id: str = ""
    # InfiniBand sizes: Azure connects the fabric only between VMs of one availability
    # set (or scale set), so the nodes join one, itself in the placement group.
    infiniband: bool = False
    avset_id: str = ""
    accelerated_networking: bool = False  # the size's SKU says AcceleratedNetworkingEnabled
    between_nodes: bool = False  # the NSG also allows all traffic inside the subnet


def image_reference(image: str) -> dict[str, str]:
    """An imageReference from a URN or a resource id; a ConfigError names the forms."""
    if image.startswith("/subscriptions/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4 or not all(parts):
        raise ConfigError(
            f"providers.azure.image: '{image}' is not an image URN "
            "(publisher:offer:sku:version) or an image resource id",
            hint="e.g. " + DEFAULT_IMAGE,
        )
    publisher, offer, sku, version = parts
    return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}


def _zones(plan: VmPlan) -> dict[str, Any]:
    return {"zones": [plan.zone]} if plan.zone else {}


def group_body(plan: VmPlan) -> dict[str, Any]:
    return {"location": plan.location, "tags": dict(plan.tags)}


def nsg_body(plan: VmPlan) -> dict[str, Any]:
    rule = {
        "name": "ssh-from-caller",
        "properties": {
            "protocol": "Tcp",
            "sourceAddressPrefix": plan.ssh_cidr,
            "sourcePortRange": "*",
            "destinationAddressPrefix": "*",
            "destinationPortRange": str(plan.ssh_port),
            "access": "Allow",
            "priority": 1000,
            "direction": "Inbound",
        },
    }
    rules = [rule]
    if plan.between_nodes:
        # Azure's default AllowVnetInBound would let the nodes in too; this rule says so
        # where a reader (or a policy that removes defaults) sees it: NCCL, gloo and
        # torchrun's rendezvous use ports of their choosing.
        rules.append(
            {
                "name": "between-nodes",
                "properties": {
                    "protocol": "*",
                    "sourceAddressPrefix": SUBNET_CIDR,
                    "sourcePortRange": "*",
                    "destinationAddressPrefix": SUBNET_CIDR,
                    "destinationPortRange": "*",
                    "access": "Allow",
                    "priority": 1010,
                    "direction": "Inbound",
                },
            }
        )
    return {
        "location": plan.location,
        "tags": dict(plan.tags),
        "properties": {"securityRules": rules},
    }


def avset_body(plan: VmPlan) -> dict[str, Any]:
    """One availability set for InfiniBand nodes: managed disks need the Aligned SKU; one
    fault and update domain keeps the nodes together (no zones: a set is regional)."""
    return {
        "location": plan.location,
        "tags": dict(plan.tags),
        "sku": {"name": "Aligned"},
        "properties": {
            "platformFaultDomainCount": 1,
            "platformUpdateDomainCount": 1,
            "proximityPlacementGroup": {"id": plan.ppg_id},
        },
    }


def ppg_body(plan: VmPlan) -> dict[str, Any]:
    """A Standard proximity placement group whose intent names the job's size, so Azure
    pins it to a datacenter that has that size (api-version 2021-11-01 and later)."""
    return {
        "location": plan.location,
        "tags": dict(plan.tags),
        "properties": {
            "proximityPlacementGroupType": "Standard",
            "intent": {"vmSizes": [plan.size]},
        },
        **_zones(plan),
    }


def vnet_body(plan: VmPlan, nsg_id: str) -> dict[str, Any]:
    subnet = {
        "name": SUBNET,
        "properties": {"addressPrefix": SUBNET_CIDR, "networkSecurityGroup": {"id": nsg_id}},
    }
    return {
        "location": plan.location,
        "tags": dict(plan.tags),
        "properties": {"addressSpace": {"addressPrefixes": ["10.0.0.0/16"]}, "subnets": [subnet]},
    }


def ip_body(plan: VmPlan) -> dict[str, Any]:
    # Standard SKU public IPs must be static; Basic SKU IPs are retired (2025-09).
    return {
        "location": plan.location,
        "tags": dict(plan.tags),
        "sku": {"name": "Standard"},
        "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"},
        **_zones(plan),
    }


def nic_body(plan: VmPlan, subnet_id: str, ip_id: str, nsg_id: str) -> dict[str, Any]:
    ipconf = {
        "name": "ipconfig1",
        "properties": {
            "subnet": {"id": subnet_id},
            "publicIPAddress": {"id": ip_id},
            "privateIPAllocationMethod": "Dynamic",
        },
    }
    props: dict[str, Any] = {"ipConfigurations": [ipconf], "networkSecurityGroup": {"id": nsg_id}}
    if plan.accelerated_networking:
        props["enableAcceleratedNetworking"] = True
    return {"location": plan.location, "tags": dict(plan.tags), "properties": props}


def vm_body(plan: VmPlan, nic_id: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "hardwareProfile": {"vmSize": plan.size},
        "storageProfile": {
            "imageReference": image_reference(plan.image),
            "osDisk": {
                "createOption": "FromImage",
                "diskSizeGB": plan.disk_gb,
                "deleteOption": "Delete",
                "managedDisk": {"storageAccountType": plan.disk_sku},
            },
        },
        "osProfile": {
            "computerName": plan.vm_name[:64],
            "adminUsername": plan.admin_user,
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {
                            "path": f"/home/{plan.admin_user}/.ssh/authorized_keys",
                            "keyData": plan.ssh_public_key,
                        }
                    ]
                },
            },
        },
        "networkProfile": {
            "networkInterfaces": [
                {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
            ]
        },
    }
    if plan.ppg_id:
        props["proximityPlacementGroup"] = {"id": plan.ppg_id}
    if plan.avset_id:
        props["availabilitySet"] = {"id": plan.avset_id}
    if plan.spot:
        # maxPrice -1: pay up to the on-demand price, never evicted for price, only capacity.
        props.update(
            {"priority": "Spot", "evictionPolicy": "Delete", "billingProfile": {"maxPrice": -1}}
        )
    if plan.user_data:
        # customData is what cloud-init runs at first boot (userData is only stored for
        # IMDS to hand out), so the boot script goes there.
        custom = base64.b64encode(plan.user_data.encode()).decode("ascii")
        props["osProfile"]["customData"] = custom
    return {"location": plan.location, "tags": dict(plan.tags), "properties": props, **_zones(plan)}


def schedule_time(deadline: float, now: float) -> str | None:
    """The daily "HHMM" (UTC) of an auto-shutdown at or before ``deadline``, or None.

    The DevTestLab schedule recurs daily, so it only expresses a deadline within the next
    24 hours; the minute is rounded down so the schedule fires no later than the deadline,
    and a deadline under 2 minutes away (which might round into the past and wait a day)
    is left to the lifecycle.
    """
    if deadline - now < 120 or deadline - now > 24 * 3600 - 60:
        return None
    return datetime.fromtimestamp(deadline, UTC).strftime("%H%M")


def schedule_body(plan: VmPlan, vm_id: str, hhmm: str) -> dict[str, Any]:
    """Auto-shutdown (deallocate) of the VM at ``hhmm`` UTC: ends compute billing."""
    return {
        "location": plan.location,
        "tags": dict(plan.tags),
        "properties": {
            "status": "Enabled",
            "taskType": "ComputeVmShutdownTask",
            "dailyRecurrence": {"time": hhmm},
            "timeZoneId": "UTC",
            "targetResourceId": vm_id,
            "notificationSettings": {"status": "Disabled"},
        },
    }
