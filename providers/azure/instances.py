"""What ARM says of a VM, read back as cloudgpu's Instance: the resource group's own tags
(what describe() needs after a restart), the VM with its public address, and a Spot VM's
eviction as seen from outside it. Reads only: nothing here creates or deletes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.azure import bodies, config, deploy, nodes
from cloudgpu_providers.azure.arm import ArmClients, azure_errors, error_code

from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, CreateRequest, Instance, SSHTarget

PROVIDER = "azure"
# Our own tags on the group, next to the job's: what describe() needs after a restart.
TAG_VM = "cloudgpu-azure-vm"
TAG_MARKET = "cloudgpu-azure-market"
TAG_PRICE = "cloudgpu-azure-price"
GROUP_PREFIX = "cloudgpu-"


def offer_tags(request: CreateRequest) -> dict[str, str]:
    """What describe() reads back of the offer after a restart."""
    offer = request.offer
    return {TAG_MARKET: offer.market, TAG_PRICE: f"{offer.price_per_hour:.6g}"}


def vm_of(instance: Instance) -> tuple[str, str]:
    """(resource group, VM name) of an instance, a node of a group or not."""
    group, node = nodes.split_id(instance.id)
    return group, node or instance.tags.get(TAG_VM) or group.removeprefix(GROUP_PREFIX)


def to_instance(
    cfg: Mapping[str, Any],
    inst_id: str,
    group: str,
    tags: Mapping[str, str],
    vm: Any,
    address: str,
    key_file: str | None,
    private: str = "",
    extra: Mapping[str, Any] | None = None,
) -> Instance:
    """The Instance of ``vm`` (None: gone) in ``group``, reached at ``address``."""
    spot = tags.get(TAG_MARKET) == "spot"
    state = deploy.vm_state(vm, spot)
    props = (vm.get("properties") or {}) if vm is not None else {}
    user = str(
        (props.get("osProfile") or {}).get("adminUsername") or cfg.get("admin_user", "azureuser")
    )
    port = config.ssh_port(cfg)
    ssh = SSHTarget(host=address, port=port, user=user, key_file=key_file) if address else None
    zones = (vm.get("zones") or []) if vm is not None else []
    return Instance(
        id=inst_id,
        provider=PROVIDER,
        state=state,
        instance_type=str((props.get("hardwareProfile") or {}).get("vmSize") or ""),
        region=str(vm.get("location") or "") if vm is not None else "",
        zone=str(zones[0]) if zones else "",
        market="spot" if spot else "on_demand",
        ssh=ssh,
        tags=dict(tags),
        price_per_hour=config.as_float(tags.get(TAG_PRICE)),
        launched_at=deploy.created_at(vm) if vm is not None else None,
        nvme_mount=str(cfg.get("nvme_mount") or "/nvme"),
        private_address=private,
        extra={"resource_group": group, **(extra or {})},
    )


def read_single(arm: ArmClients, group: str, vm_name: str) -> tuple[Any, str, str]:
    """(VM or None, public address, private address) of a one-VM group."""
    from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

    vm: Any = None
    address = ""
    with azure_errors(f"describe {group}"):
        try:
            vm = arm.compute.virtual_machines.get(group, vm_name, expand="instanceView")
            ip = arm.network.public_ip_addresses.get(group, bodies.IP)
            address = str((ip.get("properties") or {}).get("ipAddress") or "")
        except ResourceNotFoundError:
            pass
    return vm, address, ""


def evicted(arm: ArmClients, instance: Instance) -> bool:
    """Whether a Spot VM is gone from (or being deleted in) a group still there."""
    from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

    group, vm_name = vm_of(instance)
    with azure_errors(f"preemption check {instance.id}"):
        try:
            vm = arm.compute.virtual_machines.get(group, vm_name)
        except ResourceNotFoundError as exc:
            # The VM gone from a group that is still there: evicted. The whole group
            # gone: terminated by us (a teardown), which is no preemption.
            return error_code(exc)[0] != "ResourceGroupNotFound"
    return (vm.get("properties") or {}).get("provisioningState") == "Deleting"


def groups(arm: ArmClients, tags: Mapping[str, str]) -> list[Mapping[str, Any]]:
    """Resource groups that may hold what carries ``tags``: ARM filters by one tag,
    never the one naming a single node (a multi-node group does not carry it; with
    only that one, every group of ours is read)."""
    items = [(k, v) for k, v in tags.items() if k != TAG_INSTANCE]
    k, v = items[0] if items else (TAG_JOB, None)
    flt = f"tagName eq '{config.odata_quote(k)}'" + (
        f" and tagValue eq '{config.odata_quote(v)}'" if v is not None else ""
    )
    with azure_errors("list resource groups"):
        return list(arm.resource.resource_groups.list(filter=flt))
