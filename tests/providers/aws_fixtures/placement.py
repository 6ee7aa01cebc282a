"""EC2 placement groups for the capacity proxy in front of moto (moto implements none:
CreatePlacementGroup is "not implemented", and it drops Placement.GroupName from
RunInstances).

The proxy answers CreatePlacementGroup / DescribePlacementGroups / DeletePlacementGroup
itself, in EC2's query-protocol XML (API reference: API_CreatePlacementGroup.html,
API_DescribePlacementGroups.html, API_DeletePlacementGroup.html, and the PlacementGroup
data type), with EC2's errors (InvalidPlacementGroup.Duplicate, .Unknown, .InUse;
errors-overview.html). It remembers which instances RunInstances put into a group (and
whether their interface asked for EFA), writes the group back into their Placement as
EC2 reports it, and refuses to delete a group whose instances moto still has running.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree
from xml.sax.saxutils import escape

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
ACTIONS = ("CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup")
LIVE = ("pending", "running", "shutting-down", "stopping", "stopped")
Form = dict[str, list[str]]


@dataclass
class Groups:
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> group
    members: dict[str, list[str]] = field(default_factory=dict)  # name -> instance ids
    placed: list[tuple[str, str, bool]] = field(default_factory=list)  # group, type, efa
    deleted: list[str] = field(default_factory=list)
    capacity: int | None = None  # instances one group can hold before EC2 runs out


def _error(code: str, message: str) -> tuple[int, bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{escape(message)}</Message>"
        "</Error></Errors><RequestID>1a2b3c4d-example</RequestID></Response>"
    )
    return 400, body.encode()


def _tags(form: Form, prefix: str) -> dict[str, str]:
    out, i = {}, 1
    while f"{prefix}.Tag.{i}.Key" in form:
        out[form[f"{prefix}.Tag.{i}.Key"][0]] = form.get(f"{prefix}.Tag.{i}.Value", [""])[0]
        i += 1
    return out


def _item(g: dict[str, Any]) -> str:
    tags = "".join(
        f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>"
        for k, v in g["tags"].items()
    )
    return (
        f"<groupName>{escape(g['name'])}</groupName><state>available</state>"
        f"<strategy>{g['strategy']}</strategy><groupId>{g['id']}</groupId>"
        f"<groupArn>arn:aws:ec2:us-east-1:123456789012:placement-group/{escape(g['name'])}</groupArn>"
        f"<tagSet>{tags}</tagSet>"
    )


def _ok(action: str, inner: str) -> tuple[int, bytes]:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{NS}">'
        f"<requestId>{uuid.uuid4()}</requestId>{inner}</{action}Response>"
    )
    return 200, body.encode()


def answer(
    state: Groups, action: str, form: Form, live: Callable[[list[str]], list[str]]
) -> tuple[int, bytes]:
    """EC2's answer to a placement-group action; ``live(ids)`` says which of the
    instances are still up (asked of moto)."""
    name = form.get("GroupName", [""])[0]
    if action == "CreatePlacementGroup":
        strategy = form.get("Strategy", [""])[0]
        if strategy not in ("cluster", "spread", "partition"):
            return _error("InvalidParameterValue", f"Invalid strategy: {strategy}")
        if name in state.groups:
            return _error(
                "InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists."
            )
        g = {"name": name, "strategy": strategy, "id": f"pg-{uuid.uuid4().hex[:17]}",
             "tags": _tags(form, "TagSpecification.1")}  # fmt: skip
        state.groups[name] = g
        return _ok(action, f"<return>true</return><placementGroup>{_item(g)}</placementGroup>")
    if action == "DescribePlacementGroups":
        found = list(state.groups.values())
        i = 1
        while f"Filter.{i}.Name" in form:
            key = form[f"Filter.{i}.Name"][0]
            values = [v for k, vs in form.items() if k.startswith(f"Filter.{i}.Value.") for v in vs]
            if key.startswith("tag:"):
                found = [g for g in found if g["tags"].get(key[4:]) in values]
            elif key == "group-name":
                found = [g for g in found if g["name"] in values]
            i += 1
        items = "".join(f"<item>{_item(g)}</item>" for g in found)
        return _ok(action, f"<placementGroupSet>{items}</placementGroupSet>")
    if name not in state.groups:
        return _error("InvalidPlacementGroup.Unknown", f"The placement group '{name}' is unknown.")
    if live(state.members.get(name, [])):
        return _error("InvalidPlacementGroup.InUse", f"The placement group '{name}' is in use.")
    del state.groups[name]
    state.deleted.append(name)
    return _ok(action, "<return>true</return>")


def refuse_run(state: Groups, form: Form) -> tuple[int, bytes] | None:
    """RunInstances into a group EC2 does not know is refused, as EC2 does; into a full
    one (``capacity``) it gets EC2's capacity error, as a cluster group often does."""
    group = form.get("Placement.GroupName", [""])[0]
    if group and group not in state.groups:
        return _error("InvalidPlacementGroup.Unknown", f"The placement group '{group}' is unknown.")
    if group and state.capacity is not None and len(state.members.get(group, [])) >= state.capacity:
        itype = form.get("InstanceType", [""])[0]
        _, body = _error(
            "InsufficientInstanceCapacity",
            f"We currently do not have sufficient {itype} capacity in the placement group "
            f"'{group}'. Our system will be working on provisioning additional capacity.",
        )
        return 500, body  # a server error, as errors-overview.html lists it
    return None


def strip_group_filter(form: Form) -> tuple[Form, list[str]]:
    """DescribeInstances' ``placement-group-name`` filter (moto has none): taken out of
    the request to moto and applied to its answer by :func:`annotate`."""
    i, kept, wanted, n = 1, {}, [], 1
    rest = {k: v for k, v in form.items() if not k.startswith("Filter.")}
    while f"Filter.{i}.Name" in form:
        values = [v for k, vs in form.items() if k.startswith(f"Filter.{i}.Value.") for v in vs]
        if form[f"Filter.{i}.Name"][0] == "placement-group-name":
            wanted += values
        else:
            kept[f"Filter.{n}.Name"] = form[f"Filter.{i}.Name"]
            for j, v in enumerate(values, 1):
                kept[f"Filter.{n}.Value.{j}"] = [v]
            n += 1
        i += 1
    return {**rest, **kept}, wanted


def annotate(state: Groups, action: str, form: Form, data: bytes, wanted: list[str]) -> bytes:
    """Record RunInstances' group members; write each member's group into its
    Placement; keep only the ``wanted`` groups' instances (the filter moto lacks)."""
    if action == "RunInstances":
        group = form.get("Placement.GroupName", [""])[0]
        if group:
            ids = re.findall(rb"<instanceId>(i-[0-9a-f]+)</instanceId>", data)
            state.members.setdefault(group, []).extend(i.decode() for i in ids)
            efa = form.get("NetworkInterface.1.InterfaceType", [""])[0] == "efa"
            state.placed.append((group, form.get("InstanceType", [""])[0], efa))
    where = {i: g for g, ids in state.members.items() for i in ids}
    if not where and not wanted:
        return data
    root = ElementTree.fromstring(data)
    q = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    ElementTree.register_namespace("", q.strip("{}"))
    for parent in list(root.iter()):
        for item in list(parent.findall(f"{q}item")):
            iid = item.findtext(f"{q}instanceId")
            placement = item.find(f"{q}placement")
            if iid is None or placement is None:
                continue
            group = where.get(iid, "")
            if wanted and group not in wanted:
                parent.remove(item)
                continue
            name = placement.find(f"{q}groupName")
            if name is None:
                name = ElementTree.SubElement(placement, f"{q}groupName")
            name.text = group
    if wanted:  # reservations left with no instance go too
        for rset in root.iter(f"{q}reservationSet"):
            for res in list(rset.findall(f"{q}item")):
                inst = res.find(f"{q}instancesSet")
                if inst is not None and not inst.findall(f"{q}item"):
                    rset.remove(res)
    return bytes(ElementTree.tostring(root, encoding="utf-8", xml_declaration=True))
