"""Multi-node jobs: N nodes of one offer, run together with PyTorch's own launcher.

    provision N nodes of one offer (all or none; the next offer otherwise)
      -> on every node at once: connect, bootstrap, stage the data
      -> setup on every node -> run on every node (output prefixed "[node R] ")
      -> outputs from rank 0 (``all_nodes`` ones from every node)
      -> teardown of every node (and the provider's group)

Every command gets the rendezvous environment (:func:`rendezvous_env`): MASTER_ADDR
(rank 0's private address), MASTER_PORT, NODE_RANK, NNODES, GPUS_PER_NODE,
WORLD_SIZE, CLOUDGPU_NODE_IPS and CLOUDGPU_TORCHRUN, the documented way to start it::

    run: $CLOUDGPU_TORCHRUN train.py --data $CLOUDGPU_NVME/data

The job succeeds only if every node's run exits 0. The first node to fail stops the
others (their commands are killed) and its exit code is the job's. Losing any node
(preemption notice, vanished) stops every node: the checkpoint is flushed from rank 0,
every node is torn down, and a whole new group is provisioned (nodes placed together
cannot be replaced one by one), the checkpoint restored on each node, and the run
starts again. Nothing here knows a provider: Capabilities.multi_node and create_nodes.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CloudGPUError, JobError
from cloudgpu.lifecycle import states, watch
from cloudgpu.lifecycle.bootstrap import INSTANCE_ENV, bootstrap
from cloudgpu.lifecycle.collect import node_outputs
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.output import Sink
from cloudgpu.lifecycle.provision import Provisioned, provision_nodes
from cloudgpu.lifecycle.run import JobRun, LaunchOptions
from cloudgpu.lifecycle.stage import (
    flush_checkpoint,
    on_instance,
    restore_checkpoint,
    stage_data,
)
from cloudgpu.lifecycle.teardown import teardown_instance
from cloudgpu.provider import TAG_JOB
from cloudgpu.remote import Machine
from cloudgpu.spec.model import JobSpec

PORT_BASE, PORT_SPAN = 29500, 400  # MASTER_PORT: 29500 (torch's default) and up, per job


def master_port(job_id: str) -> int:
    """A port for the job's rendezvous: stable per job, spread so that jobs sharing
    hosts (sim, an owned cluster) rarely meet."""
    return PORT_BASE + zlib.crc32(job_id.encode()) % PORT_SPAN


def rendezvous_env(nodes: Sequence[Provisioned], rank: int, port: int) -> dict[str, str]:
    """torchrun's variables for node ``rank`` of ``nodes`` (rank order)."""
    addrs = [
        n.instance.private_address or (n.instance.ssh.host if n.instance.ssh else "") for n in nodes
    ]
    per_node = max(1, nodes[0].offer.gpu_count)
    nnodes = len(nodes)
    env = {
        "MASTER_ADDR": addrs[0],
        "MASTER_PORT": str(port),
        "NODE_RANK": str(rank),
        "NNODES": str(nnodes),
        "GPUS_PER_NODE": str(per_node),
        "WORLD_SIZE": str(nnodes * per_node),
        "CLOUDGPU_NODE_IPS": ",".join(addrs),
    }
    env["CLOUDGPU_TORCHRUN"] = (
        f"torchrun --nnodes={nnodes} --node_rank={rank} --nproc_per_node={per_node} "
        f"--master_addr={addrs[0]} --master_port={port}"
    )
    return env


class NodeLines:
    """One node's output to the sink, a line at a time, each prefixed ``[node R] ``."""

    def __init__(
        self, sink: Sink, rank: int, stderr: bool, tee: Callable[[bytes], None] | None = None
    ) -> None:
        self.sink, self.stderr, self.tee = sink, stderr, tee
        self.prefix = f"[node {rank}] ".encode()
        self.held = b""
        self.lock = threading.Lock()

    def __call__(self, data: bytes) -> None:
        with self.lock:
            data = self.held + data
            cut = data.rfind(b"\n") + 1
            self.held = data[cut:]
            for line in data[:cut].splitlines(keepends=True):
                self._emit(line)

    def _emit(self, line: bytes) -> None:
        if self.tee is not None:
            self.tee(line)
        self.sink.job_output(self.prefix + line, stderr=self.stderr)

    def flush(self) -> None:
        with self.lock:
            if self.held:
                self._emit(self.held + b"\n")
                self.held = b""


def run_everywhere(
    machines: Sequence[Machine],
    command: str,
    envs: Sequence[Mapping[str, str]],
    stop: threading.Event,
    sink: Sink,
) -> tuple[list[int], int | None]:
    """Run ``command`` on every node at once; the first to exit non-zero (or ``stop``)
    ends the others. Returns every node's exit status and the rank that failed first."""
    ended = threading.Event()  # this step's own stop: the job's, or a failed node
    rcs: list[int] = [0] * len(machines)
    first: list[int] = []
    lock = threading.Lock()

    def one(rank: int) -> None:
        out = NodeLines(sink, rank, False)
        err = NodeLines(sink, rank, True)
        try:
            rc = machines[rank].run(
                command, env=envs[rank], stop=ended, on_stdout=out, on_stderr=err
            )
        except CloudGPUError as exc:
            sink.info(f"node {rank}: {exc}")
            rc = 255
        finally:
            out.flush()
            err.flush()
        rcs[rank] = rc
        if rc != 0:
            with lock:
                if not ended.is_set():
                    first.append(rank)
                    ended.set()

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(len(machines))]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if stop.is_set():
            ended.set()
        for t in threads:
            t.join(0.1)
    return rcs, (first[0] if first else None)


def on_all(nodes: Sequence[object], fn: Callable[[int], object]) -> list[object]:
    """``fn(rank)`` for every node at once; the first failure is raised (after all end)."""
    with ThreadPoolExecutor(max(1, len(nodes)), thread_name_prefix="cloudgpu-node") as pool:
        futures = [pool.submit(fn, r) for r in range(len(nodes))]
        return [f.result() for f in futures]


class MultiNodeRun(JobRun):
    """A JobRun over N nodes; ``node_counts`` (offer key -> N) carries the planner's pick
    within a range, else the job's num_nodes."""

    def __init__(
        self,
        deps: Deps,
        job_id: str,
        job: JobSpec,
        offers: Sequence[Offer],
        options: LaunchOptions | None = None,
        node_counts: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(deps, job_id, job, offers, options)
        self.node_counts = dict(node_counts or {})
        self.port = master_port(job_id)

    def count(self, offer: Offer) -> int:
        return self.node_counts.get(offer.key, self.job.num_nodes)

    def _attempts(self) -> int:
        excluded: set[str] = set()
        preemptions = 0
        while True:
            nodes = provision_nodes(
                self.deps, self.job_id, self.job, self.offers, public_key=self.public_key,
                deadline=self.deadline, excluded=excluded, retry=self.opts.retry,
                count=self.count,
            )  # fmt: skip
            offer = nodes[0].offer
            self.deps.store.update_job(
                self.job_id, provider=offer.provider, instance_type=offer.instance_type
            )
            recs = [self.deps.store.instance(n.record_id) for n in nodes]
            self.live = (
                min(r.launched_at or self.deps.clock() for r in recs),
                sum(r.price_per_hour for r in recs),
                nodes[0].provider.capabilities,
            )
            up = ", ".join(n.instance.id for n in nodes)
            self.deps.sink.info(f"{len(nodes)} nodes up: {up}")
            self.watcher.watch(*nodes)
            rc = self._on_nodes(nodes, resumed=preemptions > 0)
            if rc is not None:
                return rc
            self._replace_group(nodes, excluded)
            preemptions += 1
            if preemptions >= self.max_preemptions:
                self._on_demand_now(preemptions, excluded)

    def _replace_group(self, nodes: Sequence[Provisioned], excluded: set[str]) -> None:
        """A node was lost: the whole group goes, and a new one is provisioned."""
        self.deps.store.add_event(self.job_id, "preempted", self.watcher.detail)
        self.live = None
        for n in nodes:
            rec = self.deps.store.instance(n.record_id)
            cost = teardown_instance(self.deps, rec, final_state=states.I_PREEMPTED)
            self.spent += cost
        self._release({nodes[0].offer.provider})
        key = nodes[0].offer.key
        self.deps.sink.info(f"all {len(nodes)} nodes torn down; re-provisioning without {key}")
        excluded.add(key)
        self.watcher.reset()

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
        """The job's exit code; None when a node was lost (the caller re-provisions)."""
        self.state(states.BOOTSTRAPPING)
        opened: dict[int, Machine] = {}  # closed at the end even when a connect failed
        try:

            def connect(rank: int) -> None:
                opened[rank] = self._connect(nodes[rank])

            on_all(nodes, connect)
            machines = [opened[r] for r in range(len(nodes))]
            # The store is this thread's: node threads only talk to their machines.
            self.state(states.STAGING)
            on_all(nodes, lambda r: self._prepare_node(machines[r], nodes[r]))
            if resumed:
                sink, ckpt, env = self.deps.sink, self.ckpt_local, self.deps.env
                on_all(nodes, lambda r: restore_checkpoint(machines[r], self.job, ckpt, sink, env))
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

    def _prepare_node(self, machine: Machine, got: Provisioned) -> None:
        """Bootstrap (NVMe, deadline) and the job's data, on one node."""
        caps = got.provider.capabilities
        line = bootstrap(machine, got.instance, caps, got.deadline, None)
        self.deps.sink.info(f"{got.instance.id}: {line}", detail=True)
        stage_data(machine, self.job, self.deps.sink, self.deps.paths.cache_dir, self.deps.env)

    def _envs(
        self, machines: Sequence[Machine], nodes: Sequence[Provisioned]
    ) -> list[dict[str, str]]:
        envs = []
        for rank, (m, n) in enumerate(zip(machines, nodes, strict=True)):
            env = {
                **self.job.env,
                "CLOUDGPU_JOB": self.job_id,
                INSTANCE_ENV: n.instance.id,
                "CLOUDGPU_NVME": m.nvme_path,
                **rendezvous_env(nodes, rank, self.port),
            }
            if self.job.checkpoint:
                env["CLOUDGPU_CHECKPOINT"] = on_instance(m, self.job.checkpoint)
            envs.append(env)
        return envs

    def _commands_all(self, machines: Sequence[Machine], nodes: Sequence[Provisioned]) -> int:
        envs = self._envs(machines, nodes)
        for step, command in ((states.SETUP, self.job.setup), (states.RUNNING, self.job.run)):
            if not command.strip() or self.watcher.reason:
                continue
            self.state(step)
            what = "setup" if step == states.SETUP else "run"
            self.deps.sink.info(f"{what}: starting on {len(nodes)} nodes")
            rcs, failed = run_everywhere(machines, command, envs, self.watcher.stop, self.deps.sink)
            if failed is None:
                if step == states.RUNNING:
                    return 0 if not self.watcher.reason else max(rcs)
                continue
            rc = rcs[failed]
            if not self.watcher.reason:
                self.deps.sink.info(
                    f"{what} failed on node {failed} (exit code {rc}): stopped the other nodes"
                )
            if step == states.SETUP and not self.watcher.reason:
                raise JobError(
                    f"job {self.job_id}: setup failed on node {failed} with exit code {rc}; "
                    f"log: {self._log_path()}",
                    exit_code=rc,
                )
            return rc
        return 0

    def _end(self, keep: bool) -> None:
        super()._end(keep)
        if not self.deps.store.instances(self.job_id, live_only=True):
            self._release({r.provider for r in self.deps.store.instances(self.job_id)})
