"""The shared provider contract suite, for every provider plugin: built-in or third-party.

Subclass :class:`ProviderContract` in your plugin's tests and supply two fixtures:

* ``provider``: a ready Provider talking to real local parts (a loopback HTTP server
  replaying your API's documented answers, a sandbox account, moto, a local sshd), never
  a mock of your own making;
* ``offer``: an Offer that provider can create right now.

The suite checks the name and capabilities, availability, the offer invariants (over the
provider's own offers, its live offers where it has a price API, and its rows in the
bundled catalog), create -> describe -> list by tag -> terminate (verified, idempotent)
that an unknown id describes as gone, and, for a provider claiming
Capabilities.replace_node, that a lost node's replacement joins its live group's
placement (or is refused with CapacityError, leaving nothing behind). That check needs a
third fixture, ``placement_of``: a function naming the placement an instance is in, read
from your API's own answers (the fake's recorded state), never from what create() was
asked. It needs pytest (``pip install
'cloudgpu[dev]'`` or your own pytest); importing cloudgpu never imports this module.
docs/providers.md walks through a plugin that uses it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Hashable
from dataclasses import replace

import pytest

from cloudgpu.batch import BatchJob
from cloudgpu.catalog import snapshot
from cloudgpu.catalog.catalog import snapshot_path
from cloudgpu.catalog.offer import FLAG_FREE_TIER, FLAG_UNKNOWN_GPU, MARKETS, Offer
from cloudgpu.errors import CapacityError
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_OWNER,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)
from cloudgpu.registry import has_live_prices

# Which placement (group, policy, gang) an instance is in, as the provider's API says.
PlacementOf = Callable[[Instance], Hashable]

SUBCLASSES: list[type] = []  # every suite defined, so a coverage test can find the gaps


def bundled_offers(name: str) -> list[Offer]:
    """The provider's rows in cloudgpu's bundled catalog snapshot ([] when it has none)."""
    path = snapshot_path(name)
    return snapshot.read(path).offers if path.is_file() else []


def offer_problems(o: Offer, name: str, caps: Capabilities, *, bundled: bool = False) -> list[str]:
    """What is wrong with one offer of provider ``name`` ([] when nothing is).

    A bundled table may list a market the plugin cannot buy (RunPod's retired spot rows):
    the planner leaves those out, so the spot rule is checked for the plugin's own offers
    only."""
    free = FLAG_FREE_TIER in o.flags
    known = FLAG_UNKNOWN_GPU not in o.flags
    checks = {
        f"provider {o.provider!r}, not {name!r}": o.provider == name,
        f"market {o.market!r}": o.market in MARKETS,
        "no instance type": bool(o.instance_type),
        # A CPU-only machine (gpu: none jobs) names no GPU; a GPU machine names its GPU.
        f"GPU {o.gpu!r} x {o.gpu_count}": (o.gpu_count >= 1) == bool(o.gpu),
        f"price {o.price_per_hour!r}": math.isfinite(o.price_per_hour)
        and (o.price_per_hour > 0 or (free and o.price_per_hour == 0)),
        "free tier without session_hours": not free or "session_hours" in o.extra,
        f"GPU memory {o.gpu_memory_gb!r}": o.gpu_memory_gb > 0 or not known or not o.gpu_count,
        f"vCPUs {o.vcpus!r}, RAM {o.memory_gb!r}": o.vcpus > 0 and o.memory_gb > 0,
        f"NVMe {o.nvme_count} x {o.nvme_size_gb}": o.nvme_count >= 0 and o.nvme_size_gb >= 0,
        "no observed_at": bool(o.observed_at),
        "spot offer, but capabilities.spot is False": bundled or o.market != "spot" or caps.spot,
    }
    return [f"{o.key}: {what}" for what, ok in checks.items() if not ok]


class ProviderContract:
    provider_name: str = ""
    # Seconds to wait for an instance to leave PENDING in wait_running().
    ready_timeout: float = 60.0

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        SUBCLASSES.append(cls)

    # -- helpers ---------------------------------------------------------------------

    def request(self, offer: Offer, job: str | None = None) -> CreateRequest:
        job = job or f"contract-{uuid.uuid4().hex[:8]}"
        return CreateRequest(
            offer=offer,
            name=job,
            tags={
                TAG_JOB: job,
                TAG_OWNER: "contract-test",
                TAG_EXPIRES: str(int(time.time()) + 3600),
            },
            ssh_public_key="",
            idempotency_token=uuid.uuid4().hex,
            deadline=time.time() + 3600,
            # Batch providers take the job itself; a run long enough to be seen running.
            batch=BatchJob(job_id=job, setup="", run="sleep 60"),
        )

    def group_requests(self, offer: Offer, n: int) -> list[CreateRequest]:
        """One request per rank of an ``n``-node group, as the lifecycle fills them in."""
        base = replace(self.request(offer), batch=None)
        group = f"cg-{uuid.uuid4().hex[:10]}"
        return [
            replace(
                base,
                name=f"{base.name}-{r}",
                tags={**base.tags, TAG_INSTANCE: f"i-{r}"},
                idempotency_token=uuid.uuid4().hex,
                group=group,
                node_rank=r,
                num_nodes=n,
            )
            for r in range(n)
        ]

    def wait_running(self, provider: Provider, instance_id: str) -> Instance:
        deadline = time.monotonic() + self.ready_timeout
        inst = provider.describe(instance_id)
        while inst.state == InstanceState.PENDING and time.monotonic() < deadline:
            time.sleep(0.2)
            inst = provider.describe(instance_id)
        return inst

    # -- the contract ----------------------------------------------------------------

    def test_name_and_capabilities(self, provider: Provider) -> None:
        assert provider.name == self.provider_name
        assert isinstance(provider.capabilities, Capabilities)

    def test_availability(self, provider: Provider) -> None:
        av = provider.availability()
        assert isinstance(av, Availability)
        assert av.enabled, av.reason
        assert av.reason

    def test_offer_invariants(self, provider: Provider) -> None:
        """Every offer the provider can produce, from each of its sources, is sane; a
        provider with no offers from any source fails (the check would prove nothing)."""
        caps = provider.capabilities
        own = list(provider.offers())
        live = provider.fetch_offers() if has_live_prices(provider) else []
        bundled = bundled_offers(provider.name)
        assert own or live or bundled, f"{provider.name}: no offers from any source to check"
        problems = [p for o in [*own, *live] for p in offer_problems(o, provider.name, caps)]
        problems += [
            p for o in bundled for p in offer_problems(o, provider.name, caps, bundled=True)
        ]
        assert not problems, "\n".join(problems[:20])

    def test_create_describe_list_terminate(self, provider: Provider, offer: Offer) -> None:
        req = self.request(offer)
        inst = provider.create(req)
        try:
            assert inst.provider == self.provider_name
            assert inst.id
            for k, v in req.tags.items():
                assert inst.tags.get(k) == v
            running = self.wait_running(provider, inst.id)
            assert running.state == InstanceState.RUNNING
            here = bool(running.workdir) or provider.capabilities.batch
            if not here and provider.open_machine(running) is None:
                assert running.ssh is not None and running.ssh.host  # reachable somehow
            found = provider.list_instances({TAG_JOB: req.tags[TAG_JOB]})
            assert [i.id for i in found] == [inst.id]
            assert provider.list_instances({TAG_JOB: "no-such-job"}) == []
        finally:
            provider.terminate(inst.id)
        gone = provider.describe(inst.id)
        assert gone.state.is_gone
        assert provider.list_instances({TAG_JOB: req.tags[TAG_JOB]}) == []
        provider.terminate(inst.id)  # idempotent

    @pytest.fixture
    def placement_of(self) -> PlacementOf | None:
        """Override in a suite whose provider claims Capabilities.replace_node."""
        return None

    def test_replace_node_joins_the_live_group(
        self, provider: Provider, offer: Offer, placement_of: PlacementOf | None
    ) -> None:
        """Two nodes made together, rank 1 lost: a request naming the live group, that
        rank and the survivor's zone gets a node in the survivor's placement, or
        CapacityError with nothing of it left."""
        if not provider.capabilities.replace_node:
            pytest.skip(f"{provider.name} does not claim Capabilities.replace_node")
        assert placement_of is not None, (
            f"{provider.name} claims replace_node: its suite must supply a placement_of "
            "fixture reading an instance's placement from the provider's API"
        )
        reqs = self.group_requests(offer, 2)
        survivor, lost = provider.create_nodes(reqs)
        made = [survivor.id, lost.id]
        try:
            here = self.wait_running(provider, survivor.id)
            placement = placement_of(here)
            assert placement, f"{survivor.id}: made in a group, but in no placement"
            provider.terminate(lost.id)
            again = replace(
                reqs[1],
                offer=replace(offer, zone=here.zone),
                name=f"{reqs[1].name}-r",
                tags={**reqs[1].tags, TAG_INSTANCE: "i-r"},
                idempotency_token=uuid.uuid4().hex,
            )
            try:
                new = provider.create(again)
            except CapacityError:
                found = provider.list_instances({TAG_JOB: again.tags[TAG_JOB]})
                assert [i.id for i in found] == [survivor.id]  # the refused one left nothing
                return
            made.append(new.id)
            joined = self.wait_running(provider, new.id)
            assert joined.state == InstanceState.RUNNING
            assert joined.zone == here.zone, "the replacement left the survivors' zone"
            assert placement_of(joined) == placement, "the replacement is outside the group"
            assert joined.tags.get(TAG_INSTANCE) == "i-r"
            found = provider.list_instances({TAG_JOB: again.tags[TAG_JOB]})
            assert sorted(i.id for i in found) == sorted([survivor.id, new.id])
        finally:
            for iid in reversed(made):
                provider.terminate(iid)

    def test_describe_unknown_is_terminated(self, provider: Provider) -> None:
        assert provider.describe("cgpu-does-not-exist-0000").state.is_gone


@pytest.fixture
def unique_job() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"
