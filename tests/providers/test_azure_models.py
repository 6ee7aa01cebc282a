"""Every ARM body the Azure provider sends, loaded into the Azure SDK's own models: each
key at every level must be a field the model knows (by its REST name), so a misspelt or
misplaced property (which ARM would ignore or refuse) fails here; a multi-node node's
bodies (proximity placement group, accelerated networking, the NSG rule between nodes)
too. The DevTestLab
auto-shutdown schedule has no SDK model among our dependencies: it is checked against
the API doc only (see providers/azure/README.md)."""

from __future__ import annotations

import sys
import typing
from dataclasses import replace
from types import ModuleType
from typing import Any

import pytest
from azure.mgmt.compute import models as compute
from azure.mgmt.network import models as network
from azure.mgmt.resource.resources import models as resource
from cloudgpu_providers.azure import bodies

SUB = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/cloudgpu-j/providers"
NSG = f"{SUB}/Microsoft.Network/networkSecurityGroups/nsg"
NIC = f"{SUB}/Microsoft.Network/networkInterfaces/nic"


def _fields(cls: type) -> dict[str, str]:
    """REST name -> attribute name of a model class (hybrid models register their
    fields on first use)."""
    try:
        cls({})
    except Exception:
        pass
    rest = getattr(cls, "_attr_to_rest_field", {})
    return {f._rest_name: attr for attr, f in rest.items()}


def _model(t: Any, module: ModuleType) -> type | None:
    if isinstance(t, type) and t.__module__.startswith(module.__name__.rsplit(".", 1)[0]):
        return t if hasattr(t, "_attr_to_rest_field") or _fields(t) else None
    for arg in typing.get_args(t):
        found = _model(arg, module)
        if found is not None:
            return found
    return None


def unknown_keys(cls: type, body: Any, module: ModuleType, path: str = "") -> list[str]:
    """Keys of ``body`` (recursively) that ``cls`` has no field for."""
    fields = _fields(cls)
    hints = typing.get_type_hints(
        cls, globalns={**vars(sys.modules[cls.__module__]), "_models": module}
    )
    bad = []
    for key, value in body.items():
        if key not in fields:
            bad.append(path + key)
            continue
        sub = _model(hints.get(fields[key]), module)
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if sub is not None and isinstance(item, dict):
                at = f"{path}{key}[{i}]." if isinstance(value, list) else f"{path}{key}."
                bad += unknown_keys(sub, item, module, at)
    return bad


def _plan(spot: bool) -> bodies.VmPlan:
    return bodies.VmPlan(
        group="cloudgpu-j",
        vm_name="j-1",
        location="eastus",
        size="Standard_NC4as_T4_v3",
        spot=spot,
        ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyOnly test",
        ssh_cidr="203.0.113.7/32",
        tags={"cloudgpu-job": "j"},
        zone="1",
        user_data="#!/bin/sh\necho hi\n",
    )


def test_the_checker_catches_a_misplaced_key() -> None:
    body = bodies.nsg_body(_plan(False))
    body["properties"]["securityRules"][0]["properties"]["sourcePrefix"] = "*"
    body["securityRules"] = []
    assert sorted(unknown_keys(network.NetworkSecurityGroup, body, network)) == [
        "properties.securityRules[0].properties.sourcePrefix",
        "securityRules",
    ]


@pytest.mark.parametrize(("spot", "node"), [(False, False), (True, False), (False, True)])
def test_every_body_is_made_of_known_sdk_fields(spot: bool, node: bool) -> None:
    """``node``: a multi-node job's node (NSG rule between the nodes, accelerated
    networking, the proximity placement group and availability set)."""
    plan = _plan(spot)
    if node:
        ppg = f"{SUB}/Microsoft.Compute/proximityPlacementGroups/ppg"
        avset = f"{SUB}/Microsoft.Compute/availabilitySets/avset"
        plan = replace(
            plan, ppg_id=ppg, avset_id=avset, accelerated_networking=True, between_nodes=True
        )
    cases = [
        (resource.ResourceGroup, bodies.group_body(plan), resource),
        (network.NetworkSecurityGroup, bodies.nsg_body(plan), network),
        (network.VirtualNetwork, bodies.vnet_body(plan, NSG), network),
        (network.PublicIPAddress, bodies.ip_body(plan), network),
        (
            network.NetworkInterface,
            bodies.nic_body(plan, f"{NSG}/subnets/s", "ip-id", NSG),
            network,
        ),
        (compute.VirtualMachine, bodies.vm_body(plan, NIC), compute),
        (compute.ProximityPlacementGroup, bodies.ppg_body(plan), compute),
        (compute.AvailabilitySet, bodies.avset_body(plan), compute),
    ]
    for cls, body, module in cases:
        assert unknown_keys(cls, body, module) == [], cls.__name__
