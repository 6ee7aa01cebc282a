"""Multi-node jobs on Azure: every node of a job in one resource group.

A job of N nodes gets one resource group (``cloudgpu-<group>``, tagged with the job's
tags, its market and price, and ``cloudgpu-azure-nodes`` = N) holding one NSG (SSH from
the caller, all traffic between the subnet's addresses), one virtual network, one
Standard proximity placement group whose intent names the size, and per node a public
IP, a NIC (accelerated networking where the size's SKU has it) and a VM that names the
placement group. A node's instance id is ``<group>/<vm>``; rank 0's private address is
the rendezvous (Instance.private_address).

Replacing one lost node (Capabilities.replace_node): create() of a request naming the
live group adds a public IP, NIC and VM to it, on the group's subnet, in its placement
group (and availability set); if that VM cannot be had only its own resources go, and
the lifecycle then replaces the whole group.

Teardown: a node that is not the group's last goes alone (VM, then NIC, then IP: ARM
refuses to delete a NIC a VM uses, or an IP a NIC uses); the last node's teardown
deletes the whole group, placement group included. A group left with no VM (a crash
between the group and the VMs, or teardowns racing) is a leftover that
`down --orphans` and the lifecycle's release delete by tag.

InfiniBand (the SKU's RdmaEnabled: ND H100/H200/MI300X v5, ND A100 v4, NDv2): Azure
connects the fabric only between VMs of one availability set or scale set, so on-demand
nodes of such a size join one availability set (Aligned, one fault and update domain)
in the placement group, and the offers say the fabric's bandwidth to the planner
(network_gbps, retail.py). Spot nodes get no availability set (whether Azure takes Spot
VMs in one is not verified here), so their offers claim no InfiniBand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cloudgpu_providers.azure import bodies, deploy, sizes
from cloudgpu_providers.azure.arm import ArmClients, azure_errors

from cloudgpu.errors import CapacityError, CloudGPUError, NotFoundError, ProviderError
from cloudgpu.provider import TAG_INSTANCE, Leftover

TAG_NODES = "cloudgpu-azure-nodes"  # on a multi-node group: the node count it was made for
KIND = "resource group"
SEP = "/"


def node_id(group: str, vm: str) -> str:
    return f"{group}{SEP}{vm}"


def split_id(instance_id: str) -> tuple[str, str | None]:
    """(resource group, VM name) of a node id; (group, None) for a one-VM group's id."""
    group, sep, vm = instance_id.partition(SEP)
    return group, (vm if sep else None)


def ip_name(vm: str) -> str:
    return f"{vm}-ip"


def nic_name(vm: str) -> str:
    return f"{vm}-nic"


def group_tags(tags: Mapping[str, str], count: int) -> dict[str, str]:
    """A multi-node group's tags: the nodes' shared ones (not one node's own id)."""
    out = {k: v for k, v in tags.items() if k != TAG_INSTANCE}
    out[TAG_NODES] = str(count)
    return out


def is_multi(group: Mapping[str, Any]) -> bool:
    return TAG_NODES in (group.get("tags") or {})


def network_features(clients: ArmClients, region: str, size: str) -> tuple[bool, bool]:
    """(InfiniBand, accelerated networking) of ``size`` in ``region`` from
    resource_skus.list; (False, False) when the list cannot be read (a NIC asking for
    accelerated networking on a size without it is refused, so no guessing)."""
    try:
        with azure_errors("resource_skus.list"):
            for sku in clients.compute.resource_skus.list(filter=f"location eq '{region}'"):
                if sku.get("resourceType") != "virtualMachines":
                    continue
                if str(sku.get("name", "")).lower() != size.lower():
                    continue
                caps = {
                    str(c.get("name")): str(c.get("value")) for c in sku.get("capabilities") or []
                }
                return sizes.network_features(caps)
    except ProviderError:
        pass
    return False, False


def vms(clients: ArmClients, group: str) -> list[Mapping[str, Any]]:
    """The VMs in ``group`` (none when the group is gone)."""
    from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

    with azure_errors(f"list VMs of {group}"):
        try:
            return list(clients.compute.virtual_machines.list(group))
        except ResourceNotFoundError:
            return []


def read_node(
    clients: ArmClients, group: str, vm_name: str
) -> tuple[Mapping[str, Any] | None, str, str]:
    """(VM with its instanceView or None, public address, private address)."""
    from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

    vm: Mapping[str, Any] | None = None
    public = private = ""
    with azure_errors(f"describe {node_id(group, vm_name)}"):
        try:
            vm = clients.compute.virtual_machines.get(group, vm_name, expand="instanceView")
            ip = clients.network.public_ip_addresses.get(group, ip_name(vm_name))
            public = str((ip.get("properties") or {}).get("ipAddress") or "")
            nic = clients.network.network_interfaces.get(group, nic_name(vm_name))
            private = deploy.private_ip(nic)
        except ResourceNotFoundError:
            pass
    return vm, public, private


def terminate_node(clients: ArmClients, group: str, vm_name: str, timeout_s: float) -> str:
    """Delete one node; the group's last deletes the group. '' when done, else why not."""
    others = [v for v in vms(clients, group) if str(v.get("name")) != vm_name]
    if not others:
        return deploy.delete_group(clients, group, timeout_s)
    deploy.delete_node(clients, group, (vm_name, nic_name(vm_name), ip_name(vm_name)))
    return ""


def empty_groups(
    clients: ArmClients, groups: list[Mapping[str, Any]], tags: Mapping[str, str]
) -> list[Leftover]:
    """Multi-node groups carrying ``tags`` (an instance's own id aside) with no VM left."""
    wanted = {k: v for k, v in tags.items() if k != TAG_INSTANCE}
    out = []
    for g in groups:
        gtags = dict(g.get("tags") or {})
        if not is_multi(g) or any(gtags.get(k) != v for k, v in wanted.items()):
            continue
        if (g.get("properties") or {}).get("provisioningState") == "Deleting":
            continue
        if not vms(clients, str(g["name"])):
            out.append(Leftover(KIND, str(g["name"]), gtags, str(g.get("location") or "")))
    return out


def join(
    clients: ArmClients,
    plan: bodies.VmPlan,
    deadline: float | None,
    now: float,
    timeout_s: float,
) -> tuple[deploy.Created, bool, bool]:
    """A replacement node in the live group ``plan.group``: (what was made, InfiniBand,
    accelerated networking). CapacityError when the group is gone or the VM cannot be
    had; then nothing of the new node is left (the survivors are not touched)."""
    from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

    rg = plan.group
    try:
        with azure_errors(f"join {rg}"):
            group = clients.resource.resource_groups.get(rg)
            ppg = clients.compute.proximity_placement_groups.get(rg, bodies.PPG)
            try:
                avset_id = str(clients.compute.availability_sets.get(rg, bodies.AVSET)["id"])
            except ResourceNotFoundError:
                avset_id = ""
    except NotFoundError as exc:
        raise CapacityError(f"{rg}: its group is gone ({exc})", provider="azure") from exc
    _rdma, accelerated = network_features(clients, str(group["location"]), plan.size)
    plan = replace(
        plan,
        location=str(group["location"]),
        ppg_id=str(ppg["id"]),
        avset_id=avset_id,
        accelerated_networking=accelerated,
        **({"zone": ""} if avset_id else {}),
    )
    base = f"/subscriptions/{clients.subscription_id}/resourceGroups/{rg}/providers"
    subnet = f"{base}/Microsoft.Network/virtualNetworks/{bodies.VNET}/subnets/{bodies.SUBNET}"
    nsg = f"{base}/Microsoft.Network/networkSecurityGroups/{bodies.NSG}"
    try:
        with azure_errors(f"join {rg}"):
            poller, nic = deploy.begin_vm(clients, plan, subnet, nsg)
            made = deploy.finish_vm(clients, plan, poller, nic, deadline, now, timeout_s)
    except CloudGPUError:
        try:
            deploy.delete_node(clients, rg, (plan.vm_name, plan.nic_name, plan.ip_name))
        except CloudGPUError:
            pass  # its tags let `down --orphans` find it
        raise
    return made, bool(avset_id), accelerated
