"""Multi-node jobs: N nodes of one offer, run together with PyTorch's own launcher.

    provision N nodes of one offer (all or none; the next offer otherwise)
      -> on every node at once: connect, bootstrap, stage the data
      -> setup on every node -> run on every node (output prefixed "[node R] ")
      -> outputs from rank 0 (``all_nodes`` ones from every node)
      -> teardown of every node (and the provider's group)

Every command gets the rendezvous environment (cloudgpu.lifecycle.rendezvous): MASTER_ADDR
(rank 0's private address), MASTER_PORT, NODE_RANK, NNODES, GPUS_PER_NODE,
WORLD_SIZE, CLOUDGPU_NODE_IPS and CLOUDGPU_TORCHRUN, the documented way to start it::

    run: $CLOUDGPU_TORCHRUN train.py --data $CLOUDGPU_NVME/data

The job succeeds only if every node's run exits 0. The first node to fail stops the
others (their commands are killed) and its exit code is the job's. Losing a node
(preemption notice, vanished) stops every node and flushes the checkpoint from rank 0
(synced from it while the run goes, so a rank 0 lost without notice leaves the last
sync). Where the provider can add a node to the live group (Capabilities.replace_node)
only the lost node goes: a new one of the same offer joins the group in the survivors'
zone and placement, gets bootstrap, data and setup, and every node starts the run again
from the checkpoint with a new rendezvous environment (the survivors keep their data and
setup). Where it cannot, the replacement is refused (no room in the placement), more
than one node is lost at once, or the preemption limit moves a ``spot: auto`` job on
demand, the whole group goes and the next offer's group is provisioned. Nothing here
knows a provider: Capabilities and create_nodes/create.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property

from cloudgpu.catalog.offer import Offer
from cloudgpu.costs import billing
from cloudgpu.errors import CloudGPUError, JobError, RemoteError
from cloudgpu.lifecycle import faults, states, watch
from cloudgpu.lifecycle.bootstrap import bootstrap
from cloudgpu.lifecycle.checkpoint import Syncer
from cloudgpu.lifecycle.collect import node_outputs
from cloudgpu.lifecycle.provision import Provisioned, provision_nodes, replace_node
from cloudgpu.lifecycle.rendezvous import master_port, on_all, rendezvous_env, run_everywhere
from cloudgpu.lifecycle.run import JobRun
from cloudgpu.lifecycle.stage import flush_checkpoint, restore_checkpoint, stage_data
from cloudgpu.lifecycle.teardown import teardown_instance
from cloudgpu.provider import TAG_JOB, Capabilities
from cloudgpu.remote import Machine

__all__ = ["MultiNodeRun", "node_outputs"]


class MultiNodeRun(JobRun):
    """A JobRun over N nodes: ``options.node_counts`` (offer key -> N) carries the
    planner's pick within a range, else the job's num_nodes."""

    # Each live node's (launched, $/h) and their capabilities: what cost_now bills
    # (nodes replaced one by one started at different times).
    billed: tuple[list[tuple[float, float]], Capabilities] | None = None

    @cached_property
    def prepared(self) -> set[str]:
        """The instance records bootstrapped and staged: a node kept through a
        replacement is not prepared again."""
        return set()

    @cached_property
    def set_up(self) -> set[str]:
        """The instance records whose setup has run (not again on a kept node)."""
        return set()

    @property
    def port(self) -> int:
        return master_port(self.job_id)

    def count(self, offer: Offer) -> int:
        return self.opts.node_counts.get(offer.key, self.job.num_nodes)

    def cost_now(self) -> float:
        live = self.billed
        if live is None:
            return self.spent
        now = self.deps.clock()
        nodes, caps = live
        return self.spent + sum(billing.charge(p, at, now, caps) for at, p in nodes)

    def _attempts(self) -> int:
        excluded: set[str] = set()
        preemptions = 0
        nodes: list[Provisioned] = []
        while True:
            if not nodes:
                nodes = self._provision(excluded)
            self._go_live(nodes)
            rc = self._on_nodes(nodes, resumed=preemptions > 0)
            if rc is not None:
                return rc
            preemptions += 1
            lost = self._lost_ranks(nodes)
            self.deps.store.add_event(self.job_id, "preempted", self.watcher.detail)
            at_limit = preemptions >= self.max_preemptions
            kept = None if at_limit else self._replace_lost(nodes, lost)
            self.watcher.reset()
            if kept is not None:
                nodes = kept
                continue
            self._replace_group(nodes, lost, excluded)
            nodes = []
            if at_limit:
                self._on_demand_now(preemptions, excluded)

    def _provision(self, excluded: set[str]) -> list[Provisioned]:
        nodes = provision_nodes(
            self.deps, self.job_id, self.job, self.offers, public_key=self.public_key,
            deadline=self.deadline, excluded=excluded, retry=self.opts.retry,
            count=self.count,
        )  # fmt: skip
        offer = nodes[0].offer
        self.deps.store.update_job(
            self.job_id, provider=offer.provider, instance_type=offer.instance_type
        )
        return nodes

    def _go_live(self, nodes: Sequence[Provisioned]) -> None:
        """Bill and watch ``nodes`` (a new group, or one with a node replaced)."""
        recs = [self.deps.store.instance(n.record_id) for n in nodes]
        self.billed = (
            [(r.launched_at or self.deps.clock(), r.price_per_hour) for r in recs],
            nodes[0].provider.capabilities,
        )
        up = ", ".join(n.instance.id for n in nodes)
        self.deps.sink.info(f"{len(nodes)} nodes up: {up}")
        self.watcher.watch(*nodes)

    def _lost_ranks(self, nodes: Sequence[Provisioned]) -> list[int]:
        """The ranks taken away: the one the watcher named, and any other the provider
        says is gone or has a notice pending (asked once each; a failed ask counts as
        lost: replacing a healthy node costs less than restarting on a dead one)."""
        lost = []
        for rank, got in enumerate(nodes):
            if got.instance.id == self.watcher.lost_id:
                lost.append(rank)
                continue
            try:
                gone = got.provider.describe(got.instance.id).state.is_gone
                if not gone and got.provider.capabilities.preemption_notice:
                    gone = got.provider.preemption_notice(got.instance) is not None
            except CloudGPUError:
                gone = True
            if gone:
                lost.append(rank)
        return lost or list(range(len(nodes)))

    def _replace_lost(
        self, nodes: Sequence[Provisioned], lost: Sequence[int]
    ) -> list[Provisioned] | None:
        """The group with the ``lost`` node replaced in its placement; None when that
        cannot be (the caller replaces the whole group), its survivors untouched."""
        caps = nodes[0].provider.capabilities
        if not caps.replace_node or len(lost) != 1 or len(nodes) < 2:
            return None
        (rank,) = lost
        gone = nodes[rank]
        self.billed = None
        cost = teardown_instance(
            self.deps, self.deps.store.instance(gone.record_id), final_state=states.I_PREEMPTED
        )
        self.spent += cost
        self.deps.sink.info(
            f"node {rank} ({gone.instance.id}) gone, billed ${cost:.4f}; replacing it alone, "
            f"{len(nodes) - 1} node(s) kept"
        )
        try:
            new = replace_node(
                self.deps, self.job_id, self.job, nodes, rank,
                public_key=self.public_key, deadline=self.deadline(gone.offer),
            )  # fmt: skip
        except CloudGPUError as exc:
            self.deps.sink.info(f"node {rank} cannot be replaced in its group: {exc}")
            return None
        self.deps.sink.info(f"node {rank} replaced by {new.instance.id}")
        return [new if r == rank else got for r, got in enumerate(nodes)]

    def _replace_group(
        self, nodes: Sequence[Provisioned], lost: Sequence[int], excluded: set[str]
    ) -> None:
        """The whole group goes (the lost nodes as preempted), and its offer with it:
        the next walk provisions a new group."""
        self.billed = None
        gone = {nodes[r].record_id for r in lost}
        for rec in self.deps.store.instances(self.job_id, live_only=True):
            final = states.I_PREEMPTED if rec.id in gone else states.I_TERMINATED
            self.spent += teardown_instance(self.deps, rec, final_state=final)
        self._release({nodes[0].offer.provider})
        key = nodes[0].offer.key
        self.deps.sink.info(f"all {len(nodes)} nodes torn down; re-provisioning without {key}")
        excluded.add(key)

    def _release(self, provider_names: set[str]) -> None:
        """What the providers made for the group besides its nodes (an AWS placement
        group), once the nodes are gone; a failure is said, `down --orphans` retries."""
        for name in sorted(provider_names):
            provider = self.deps.provider(name)
            try:
                for item in provider.leftovers({TAG_JOB: self.job_id}):
                    provider.remove_leftover(item)
            except CloudGPUError as exc:
                self.deps.sink.info(f"{name}: left for `down --orphans`: {exc}")

    def _on_nodes(self, nodes: Sequence[Provisioned], resumed: bool) -> int | None:
        """The job's exit code; None when a node was lost (the caller replaces it).
        Only nodes new to the job are bootstrapped, staged and set up."""
        opened: dict[int, Machine] = {}  # closed at the end even when a connect failed
        try:
            try:
                machines = self._ready(nodes, resumed, opened)
            except RemoteError:
                if self._trip_if_lost(nodes):
                    return None  # before the run: nothing new to flush
                raise
            rc = self._commands_all(machines, nodes)
            if self.watcher.reason and self.job.checkpoint:
                flush_checkpoint(
                    machines[0], self.job, self.ckpt_local, self.deps.sink, self.deps.env
                )
            if self.watcher.reason == watch.PREEMPTED:
                return None
            if self.job.outputs:
                self.state(states.COLLECTING)
                for rank, (m, got) in enumerate(zip(machines, nodes, strict=True)):
                    outputs = node_outputs(self.job.outputs, rank)
                    if outputs:
                        opened[rank] = self._collect(m, got, rc, replace(self.job, outputs=outputs))
            return rc
        finally:
            for m in opened.values():
                m.close()

    def _ready(
        self, nodes: Sequence[Provisioned], resumed: bool, opened: dict[int, Machine]
    ) -> list[Machine]:
        """Every node connected (into ``opened``), the new ones prepared, and the
        checkpoint restored on each when the run resumes."""
        self.state(states.BOOTSTRAPPING)
        ranks = range(len(nodes))

        def connect(rank: int) -> None:
            opened[rank] = self._connect(nodes[rank])

        on_all(ranks, connect)
        machines = [opened[r] for r in ranks]
        # The store is this thread's: node threads only talk to their machines.
        self.state(states.STAGING)
        prepared = self.prepared

        def prepare(rank: int) -> None:
            self._prepare_node(machines[rank], nodes[rank])
            prepared.add(nodes[rank].record_id)  # one node lost: the others stay prepared

        on_all([r for r in ranks if nodes[r].record_id not in prepared], prepare)
        if resumed:
            sink, ckpt, env = self.deps.sink, self.ckpt_local, self.deps.env
            on_all(ranks, lambda r: restore_checkpoint(machines[r], self.job, ckpt, sink, env))
        return machines

    def _prepare_node(self, machine: Machine, got: Provisioned) -> None:
        """Bootstrap (NVMe, deadline) and the job's data, on one node."""
        caps = got.provider.capabilities
        line = bootstrap(machine, got.instance, caps, got.deadline, None)
        self.deps.sink.info(f"{got.instance.id}: {line}", detail=True)
        stage_data(machine, self.job, self.deps.sink, self.deps.paths.cache_dir, self.deps.env)

    def _envs(
        self, machines: Sequence[Machine], nodes: Sequence[Provisioned]
    ) -> list[dict[str, str]]:
        return [
            {**self.job_env(m, n), **rendezvous_env(nodes, rank, self.port)}
            for rank, (m, n) in enumerate(zip(machines, nodes, strict=True))
        ]

    def _commands_all(self, machines: Sequence[Machine], nodes: Sequence[Provisioned]) -> int:
        """Setup on the nodes that have not had it, then the run on every node (rank 0's
        checkpoint synced back while it runs); the run's exit code."""
        envs = self._envs(machines, nodes)
        stop, sink = self.watcher.stop, self.deps.sink
        set_up = self.set_up
        fresh = [r for r, got in enumerate(nodes) if got.record_id not in set_up]
        if self.job.setup.strip() and fresh and not self.watcher.reason:
            self.state(states.SETUP)
            sink.info(f"setup: starting on {len(fresh)} node(s)")
            rcs, failed = run_everywhere(machines, self.job.setup, envs, stop, sink, fresh)
            if failed is not None and not self._node_lost(nodes, failed, rcs[failed], "setup"):
                # Not a lost node: the job's own failure, unless a limit stopped it.
                if self.watcher.reason:
                    return rcs[failed]
                raise JobError(
                    f"job {self.job_id}: setup failed on node {failed} with exit code "
                    f"{rcs[failed]}; log: {self._log_path()}",
                    exit_code=rcs[failed],
                )
            if failed is None:
                set_up.update(nodes[r].record_id for r in fresh)
        if not self.job.run.strip() or self.watcher.reason:
            return 0
        self.state(states.RUNNING)
        sink.info(f"run: starting on {len(nodes)} nodes")
        with Syncer(machines[0], self.job, self.ckpt_local, sink, self.deps.env):
            rcs, failed = run_everywhere(machines, self.job.run, envs, stop, sink)
        if failed is None:
            return 0 if not self.watcher.reason else max(rcs)
        self._node_lost(nodes, failed, rcs[failed], "run")
        return rcs[failed]

    def _node_lost(self, nodes: Sequence[Provisioned], failed: int, rc: int, what: str) -> bool:
        """After node ``failed`` ended the step: was a node taken away (then the
        preemption path: the watcher is tripped), or did the job fail?"""
        if self.watcher.reason:
            return self.watcher.reason == watch.PREEMPTED
        if self._trip_if_lost(nodes):
            return True
        self.deps.sink.info(
            f"{what} failed on node {failed} (exit code {rc}): stopped the other nodes"
        )
        return False

    def _trip_if_lost(self, nodes: Sequence[Provisioned]) -> bool:
        """Whether a node was taken away (the watcher is then tripped: the preemption
        path). A dead peer fails the others' collectives and sessions too, often before
        its own session reports it: every node is asked, not only the one that failed."""
        if self.watcher.reason == watch.PREEMPTED:
            return True
        for got in nodes:
            state = faults.instance_lost(got, self.deps.sleep)
            if state is not None:
                iid = got.instance.id
                self.watcher.trip(watch.PREEMPTED, f"instance {iid} is {state.value}", iid)
                return True
        return False

    def _end(self, keep: bool) -> None:
        super()._end(keep)
        if not self.deps.store.instances(self.job_id, live_only=True):
            self._release({r.provider for r in self.deps.store.instances(self.job_id)})
