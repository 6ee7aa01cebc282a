"""The Compute Engine calls a single VM needs, each mapped at this boundary: insert and
get an instance, its SSH firewall rule, deletes that tolerate what is gone already, the
wait for a long-running operation, and the operation log that tells a Spot preemption
from a plain termination. It decides nothing: provider.py says when each is made or
removed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.gcp import instances as build
from cloudgpu_providers.gcp.clients import PROVIDER, Clients, operation_error

from cloudgpu.errors import NotFoundError, ProviderError, TransientError

OP_WAITS = 20  # zoneOperations.wait returns after at most ~2 min; 20 waits ~ 40 min


def _exists_already(exc: ProviderError) -> bool:
    return "alreadyExists" in str(exc) or "already exists" in str(exc)


class Compute:
    def __init__(self, clients: Clients, project: str) -> None:
        self.clients, self.project = clients, project

    def wait(self, op: Any, zone: str | None, region: str | None = None) -> None:
        """Wait for a long-running operation (zone, region or global) and raise its error."""
        from google.cloud import compute_v1

        done = compute_v1.Operation.Status.DONE
        if zone:
            client = self.clients.compute("ZoneOperationsClient")
            where: dict[str, Any] = {"project": self.project, "zone": zone}
        elif region:
            client = self.clients.compute("RegionOperationsClient")
            where = {"project": self.project, "region": region}
        else:
            client = self.clients.compute("GlobalOperationsClient")
            where = {"project": self.project}
        for _ in range(OP_WAITS):
            if op.status == done:
                break
            op = self.clients.call(client.wait, request={**where, "operation": op.name})
        else:
            raise TransientError(f"operation {op.name} did not finish", provider=PROVIDER)
        error = operation_error(op)
        if error is not None:
            raise error

    def insert(self, zone: str, body: Any, token: str) -> None:
        client = self.clients.compute("InstancesClient")
        req: dict[str, Any] = {"project": self.project, "zone": zone, "instance_resource": body}
        if token:
            req["request_id"] = build.request_id(token)
        try:
            op = self.clients.call(client.insert_unary, request=req)
        except ProviderError as exc:
            if not _exists_already(exc):
                raise
            return  # a retry of our own create: the instance is there
        self.wait(op, zone)

    def get(self, zone: str, name: str) -> Any | None:
        client = self.clients.compute("InstancesClient")
        try:
            return self.clients.call(
                client.get, request={"project": self.project, "zone": zone, "instance": name}
            )
        except NotFoundError:
            return None

    def ensure_firewall(
        self, name: str, cidr: str, network: str, tags: Mapping[str, str], port: int
    ) -> bool:
        """Create the rule; False when it exists already (a retried create)."""
        client = self.clients.compute("FirewallsClient")
        body = build.firewall_body(f"{name}-ssh", name, cidr, network, tags, port)
        try:
            op = self.clients.call(
                client.insert_unary, request={"project": self.project, "firewall_resource": body}
            )
        except ProviderError as exc:
            if _exists_already(exc):
                return False
            raise
        self.wait(op, None)
        return True

    def cleanup(self, zone: str, name: str) -> None:
        """Delete the VM and its firewall rule; each may already be gone."""
        instances = self.clients.compute("InstancesClient")
        try:
            op = self.clients.call(
                instances.delete_unary,
                request={"project": self.project, "zone": zone, "instance": name},
            )
            self.wait(op, zone)
        except NotFoundError:
            pass
        self.delete_firewall(f"{name}-ssh")

    def delete_firewall(self, name: str) -> None:
        firewalls = self.clients.compute("FirewallsClient")
        try:
            op = self.clients.call(
                firewalls.delete_unary, request={"project": self.project, "firewall": name}
            )
            self.wait(op, None)
        except NotFoundError:
            pass

    def firewall_exists(self, name: str) -> bool:
        client = self.clients.compute("FirewallsClient")
        try:
            self.clients.call(client.get, request={"project": self.project, "firewall": name})
        except NotFoundError:
            return False
        return True

    def preempted(self, zone: str, name: str) -> bool:
        """A Spot VM deleted by GCP leaves a compute.instances.preempted operation."""
        client = self.clients.compute("ZoneOperationsClient")
        request = {
            "project": self.project,
            "zone": zone,
            "filter": 'operationType = "compute.instances.preempted"',
        }
        try:
            for page in self.clients.pages(client.list, request):
                if any(op.target_link.endswith(f"/instances/{name}") for op in page.items):
                    return True
        except ProviderError:
            return False  # an unknown cause is reported as a plain termination
        return False
