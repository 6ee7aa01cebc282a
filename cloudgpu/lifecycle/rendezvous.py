"""The pieces a multi-node job runs with: the rendezvous environment each node gets
(torchrun's variables), its output a line at a time with a ``[node R] `` prefix, and a
command run on several nodes at once, the first failure ending the others.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from cloudgpu.errors import CloudGPUError
from cloudgpu.lifecycle.output import Sink
from cloudgpu.lifecycle.provision import Provisioned
from cloudgpu.remote import Machine

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
    ranks: Sequence[int] | None = None,
) -> tuple[list[int], int | None]:
    """Run ``command`` on every node of ``ranks`` (default all) at once; the first to
    exit non-zero (or ``stop``) ends the others. Returns every node's exit status (0
    for those not in ``ranks``) and the rank that failed first."""
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

    which = range(len(machines)) if ranks is None else ranks
    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in which]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if stop.is_set():
            ended.set()
        for t in threads:
            t.join(0.1)
    return rcs, (first[0] if first else None)


def on_all(ranks: Sequence[int], fn: Callable[[int], object]) -> list[object]:
    """``fn(rank)`` for every rank at once; the first failure is raised (after all end)."""
    with ThreadPoolExecutor(max(1, len(ranks)), thread_name_prefix="cloudgpu-node") as pool:
        futures = [pool.submit(fn, r) for r in ranks]
        return [f.result() for f in futures]
