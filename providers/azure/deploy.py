"""Creating and deleting one job's Azure resource group, and reading a VM's state.

One resource group per job holds the NSG, vnet, public IP, NIC, VM, OS disk and the
auto-shutdown schedule, all tagged with the job's tags, so deleting the group is total
teardown and a group found by tag after a crash is everything to remove. Every ARM PUT is
by name, so a retried create with the same request name converges on the same resources
(Azure's form of an idempotency token).

Instance-side deadline on Azure: an OS ``shutdown`` leaves the VM *Stopped* and still
billed for compute; only deallocation ends that. So when the deadline is within 24 hours
the group gets a Microsoft.DevTestLab/schedules auto-shutdown (Azure deallocates the VM
at that minute, whatever the client does); the lifecycle's teardown, or
``cloudgpu down --orphans``, then deletes the group (disk and IP bill until then).
The schedule recurs daily, so a deadline more than 24 hours away cannot be expressed
with it: such jobs get no schedule and rely on the lifecycle's teardown and the orphan
sweep (the on-instance power-off at the deadline then stops the work, not the bill).

This module holds the SDK calls and cleanup; bodies.py holds what is sent. It is given
the clients; it creates none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from cloudgpu_providers.azure import bodies
from cloudgpu_providers.azure.arm import ArmClients, azure_errors, map_error

from cloudgpu.errors import CapacityError, CloudGPUError
from cloudgpu.provider import InstanceState


@dataclass(frozen=True)
class Created:
    vm: Mapping[str, Any]
    public_ip: str
    private_ip: str = ""


def _id(resource: Any) -> str:
    return str(resource["id"])


def create_group(
    clients: ArmClients,
    plan: bodies.VmPlan,
    deadline: float | None,
    now: float,
    timeout_s: float,
    delete_timeout_s: float,
) -> Created:
    """Create every resource of ``plan``; on any failure delete the group, then raise."""
    (created,) = create_nodes(clients, plan, [plan], deadline, now, timeout_s, delete_timeout_s)
    return created


def create_nodes(
    clients: ArmClients,
    group: bodies.VmPlan,
    nodes: Sequence[bodies.VmPlan],
    deadline: float | None,
    now: float,
    timeout_s: float,
    delete_timeout_s: float,
) -> list[Created]:
    """One group (``group``'s tags and network) holding a VM per plan of ``nodes``, all
    or none: on any failure the whole group is deleted (one call), then the error is
    raised. Several nodes share a proximity placement group (and, InfiniBand ones, an
    availability set in it); their VMs are started together and then waited for."""
    try:
        with azure_errors(f"create {group.group}"):
            subnet_id, nsg_id = _network(clients, group)
            if len(nodes) > 1:
                ppg = clients.compute.proximity_placement_groups.create_or_update(
                    group.group, bodies.PPG, bodies.ppg_body(group)
                )
                nodes = [replace(p, ppg_id=_id(ppg)) for p in nodes]
                if group.infiniband:
                    avset = clients.compute.availability_sets.create_or_update(
                        group.group, bodies.AVSET, bodies.avset_body(nodes[0])
                    )
                    nodes = [replace(p, avset_id=_id(avset)) for p in nodes]
            started = [(p, *begin_vm(clients, p, subnet_id, nsg_id)) for p in nodes]
            return [
                finish_vm(clients, p, poller, nic, deadline, now, timeout_s)
                for p, poller, nic in started
            ]
    except CloudGPUError as exc:
        cleanup = delete_group(clients, group.group, delete_timeout_s)
        if cleanup:
            # Keep the original error type (the lifecycle fails over on it) and say that
            # something may be left for `cloudgpu down --orphans`.
            exc.args = (f"{exc}; {cleanup}",)
        raise


def _network(clients: ArmClients, plan: bodies.VmPlan) -> tuple[str, str]:
    """The group, its NSG and virtual network: (subnet id, NSG id)."""
    rg, net = plan.group, clients.network
    clients.resource.resource_groups.create_or_update(rg, bodies.group_body(plan))
    nsg = net.network_security_groups.begin_create_or_update(
        rg, bodies.NSG, bodies.nsg_body(plan)
    ).result()
    vnet = net.virtual_networks.begin_create_or_update(
        rg, bodies.VNET, bodies.vnet_body(plan, _id(nsg))
    ).result()
    return f"{_id(vnet)}/subnets/{bodies.SUBNET}", _id(nsg)


def begin_vm(
    clients: ArmClients, plan: bodies.VmPlan, subnet_id: str, nsg_id: str
) -> tuple[Any, Mapping[str, Any]]:
    """The VM's public IP and NIC, then its create started: (VM poller, NIC)."""
    rg, net = plan.group, clients.network
    ip = net.public_ip_addresses.begin_create_or_update(
        rg, plan.ip_name, bodies.ip_body(plan)
    ).result()
    nic = net.network_interfaces.begin_create_or_update(
        rg, plan.nic_name, bodies.nic_body(plan, subnet_id, _id(ip), nsg_id)
    ).result()
    poller = clients.compute.virtual_machines.begin_create_or_update(
        rg, plan.vm_name, bodies.vm_body(plan, _id(nic))
    )
    return poller, nic


def finish_vm(
    clients: ArmClients,
    plan: bodies.VmPlan,
    poller: Any,
    nic: Mapping[str, Any],
    deadline: float | None,
    now: float,
    timeout_s: float,
) -> Created:
    poller.wait(timeout=timeout_s)
    if not poller.done():
        raise CapacityError(
            f"VM {plan.vm_name} ({plan.size}) not provisioned within {timeout_s:.0f} s",
            provider="azure",
        )
    vm = poller.result()
    hhmm = bodies.schedule_time(deadline, now) if deadline else None
    if hhmm:
        sched_id = (
            f"/subscriptions/{clients.subscription_id}/resourceGroups/{plan.group}/providers/"
            f"Microsoft.DevTestLab/schedules/shutdown-computevm-{plan.vm_name}"
        )
        clients.resource.resources.begin_create_or_update_by_id(
            sched_id,
            bodies.schedule_body(plan, _id(vm), hhmm),
            api_version=bodies.SCHEDULE_API_VERSION,
        ).result()
    address = clients.network.public_ip_addresses.get(plan.group, plan.ip_name)
    return Created(vm=vm, public_ip=_ip_of(address), private_ip=private_ip(nic))


def private_ip(nic: Mapping[str, Any] | None) -> str:
    """The first IP configuration's private address of a NIC, '' when none yet."""
    configs = ((nic or {}).get("properties") or {}).get("ipConfigurations") or []
    props = (configs[0].get("properties") or {}) if configs else {}
    return str(props.get("privateIPAddress") or "")


def delete_node(clients: ArmClients, group: str, plan_names: tuple[str, str, str]) -> None:
    """One node of a group that other nodes still use: its VM (and with it its OS disk,
    deleteOption Delete), then its NIC and public IP. Gone already counts as done."""
    from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

    vm, nic, ip = plan_names
    steps = (
        lambda: clients.compute.virtual_machines.begin_delete(group, vm),
        lambda: clients.network.network_interfaces.begin_delete(group, nic),
        lambda: clients.network.public_ip_addresses.begin_delete(group, ip),
    )
    with azure_errors(f"delete {group}/{vm}"):
        for step in steps:
            try:
                step().result()
            except ResourceNotFoundError:
                continue


def _ip_of(address: Mapping[str, Any]) -> str:
    props = address.get("properties") or {}
    return str(props.get("ipAddress") or "")


def delete_group(clients: ArmClients, group: str, timeout_s: float) -> str:
    """Delete ``group`` and wait; '' when gone (or never there), else what went wrong."""
    from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

    try:
        poller = clients.resource.resource_groups.begin_delete(group)
        poller.wait(timeout=timeout_s)
    except ResourceNotFoundError:
        return ""
    except Exception as exc:
        return f"deleting resource group {group} failed ({map_error(exc, 'delete')})"
    try:
        if clients.resource.resource_groups.check_existence(group):
            return f"resource group {group} still exists after deletion"
    except Exception as exc:
        return f"could not verify deletion of {group} ({map_error(exc, 'verify')})"
    return ""


def vm_state(vm: Mapping[str, Any] | None, spot: bool) -> InstanceState:
    """The shared state of a VM (with its instanceView), or of its absence."""
    if vm is None:
        # A spot VM with evictionPolicy Delete vanishes from its group when evicted.
        return InstanceState.PREEMPTED if spot else InstanceState.TERMINATED
    props = vm.get("properties") or {}
    prov = str(props.get("provisioningState") or "")
    if prov == "Deleting":
        return InstanceState.STOPPING
    statuses = (props.get("instanceView") or {}).get("statuses") or []
    power = next(
        (
            str(s.get("code", ""))[len("PowerState/") :]
            for s in statuses
            if str(s.get("code", "")).startswith("PowerState/")
        ),
        "",
    )
    return _POWER.get(power) or _PROVISIONING.get(prov, InstanceState.UNKNOWN)


# https://learn.microsoft.com/azure/virtual-machines/states-billing
_POWER: dict[str, InstanceState] = {
    "starting": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,  # still billed: only deallocation ends compute billing
    "deallocating": InstanceState.STOPPING,
    "deallocated": InstanceState.STOPPED,
}
_PROVISIONING: dict[str, InstanceState] = {
    "Creating": InstanceState.PENDING,
    "Updating": InstanceState.PENDING,
    "Migrating": InstanceState.PENDING,
    "Succeeded": InstanceState.PENDING,  # provisioned but no power state reported yet
    "Failed": InstanceState.UNKNOWN,
}


def created_at(vm: Mapping[str, Any]) -> float | None:
    stamp = (vm.get("properties") or {}).get("timeCreated")
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
