"""The API side of a multi-node job's group (providers/gcp/placement.py says what the
resources are): made before the first node, removed after the last one, and found by
their descriptions when a crash left them (``down --orphans``), as is a single VM's SSH
rule that a create killed before its VM insert left behind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cloudgpu_providers.gcp import instances as build
from cloudgpu_providers.gcp import placement, pricing
from cloudgpu_providers.gcp.clients import Clients

from cloudgpu.errors import NotFoundError, ProviderError, TransientError
from cloudgpu.provider import CreateRequest, Leftover

# wait(operation, zone, region): the provider's one wait for a long-running operation.
Wait = Callable[[Any, str | None, str | None], None]


class Groups:
    def __init__(self, clients: Clients, project: str, wait: Wait) -> None:
        self.clients, self.project, self.wait = clients, project, wait

    def make(self, first: CreateRequest, count: int, region: str, network: str) -> None:
        """The nodes' firewall rule, and the compact policy where the machine takes one;
        either may exist already (a retried create)."""
        self._insert(
            self.clients.compute("FirewallsClient"),
            {"firewall_resource": placement.firewall_body(first.group, network, first.tags)},
            None,
        )
        if placement.compact(pricing.accelerator_for(first.offer)[0]):
            body = placement.policy_body(first.group, region, count, first.tags)
            self._insert(
                self.clients.compute("ResourcePoliciesClient"),
                {"region": region, "resource_policy_resource": body},
                region,
            )

    def remove(self, group: str, region: str) -> None:
        """Both resources; each may be gone already."""
        self.remove_leftover(Leftover(placement.POLICY, placement.policy_name(group), {}, region))
        self.remove_leftover(Leftover(placement.FIREWALL, placement.firewall_name(group)))

    def leftovers(self, tags: Mapping[str, str]) -> list[Leftover]:
        out = []
        rules = self.clients.compute("FirewallsClient")
        for page in self.clients.pages(rules.list, {"project": self.project}):
            for rule in page.items:
                found = placement.described_tags(rule.description, placement.FIREWALL)
                found = build.firewall_tags(rule) if found is None else found  # a VM's own
                if placement.matches(found, tags):
                    out.append(Leftover(placement.FIREWALL, rule.name, found or {}))
        policies = self.clients.compute("ResourcePoliciesClient")
        for page in self.clients.pages(policies.aggregated_list, {"project": self.project}):
            for scope, scoped in page.items.items():
                for policy in scoped.resource_policies:
                    found = placement.described_tags(policy.description, placement.POLICY)
                    if placement.matches(found, tags):
                        region = scope.rsplit("/", 1)[-1]
                        out.append(Leftover(placement.POLICY, policy.name, found or {}, region))
        return out

    def remove_leftover(self, item: Leftover) -> None:
        if item.kind == placement.FIREWALL:
            client = self.clients.compute("FirewallsClient")
            request: dict[str, Any] = {"firewall": item.id}
        elif item.kind == placement.POLICY:
            client = self.clients.compute("ResourcePoliciesClient")
            request = {"region": item.region, "resource_policy": item.id}
        else:
            return
        try:
            op = self.clients.call(
                client.delete_unary, request={"project": self.project, **request}
            )
        except NotFoundError:
            return
        except ProviderError as exc:
            # 400 resourceInUseByAnotherResource, "... is already being used by ..."
            if "already being used" in str(exc) or "resourceInUse" in str(exc):
                raise TransientError(
                    f"{item.kind} {item.id} is still used by a VM", provider="gcp"
                ) from exc
            raise
        self.wait(op, None, item.region or None)

    def _insert(self, client: Any, request: dict[str, Any], region: str | None) -> None:
        try:
            op = self.clients.call(
                client.insert_unary, request={"project": self.project, **request}
            )
        except ProviderError as exc:
            if "already exists" in str(exc) or "alreadyExists" in str(exc):
                return
            raise
        self.wait(op, None, region)
