"""Bring a job's outputs back without ever giving them up.

A collection that fails while the instance is healthy (a dropped connection, a reset
NAT) is retried over a fresh connection with growing waits. When the outputs still
cannot be fetched the instance holding them is not destroyed: :class:`OutputsNotCollected`
says where they are, the lifecycle keeps the instance for ``collect_grace`` (default
30 min, never past the instance-side deadline) and `cloudgpu down JOB --collect` fetches
them later. Outputs the job never wrote are reported, not retried.

Also here: what `down` needs to collect from an instance it did not launch itself (the
job's declared outputs from the store, the instance from its record).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cloudgpu.data import uri
from cloudgpu.errors import CloudGPUError, ProviderError, RemoteError
from cloudgpu.lifecycle.output import Sink
from cloudgpu.lifecycle.provision import Retry
from cloudgpu.lifecycle.stage import collect_outputs, local_source
from cloudgpu.provider import Instance, InstanceState, SSHTarget
from cloudgpu.remote import Machine
from cloudgpu.spec.model import JobSpec, OutputItem
from cloudgpu.state.store import InstanceRecord, JobRecord

ATTEMPTS = 4
FIRST_WAIT_S = 2.0
MAX_WAIT_S = 30.0
COLLECT_GRACE_S = 1800.0  # how long an instance holding uncollected outputs is kept


class OutputsNotCollected(RemoteError):
    """Outputs are still on the instance; it is kept so they can be fetched later,
    until ``until`` (unix seconds; None: not kept)."""

    until: float | None = None


def collect(
    machine: Machine,
    job: JobSpec,
    sink: Sink,
    reconnect: Callable[[], Machine],
    sleep: Callable[[float], None],
    attempts: int = ATTEMPTS,
    *,
    env: Mapping[str, str],
    still_there: Callable[[], bool] = lambda: True,
) -> tuple[Machine, list[str]]:
    """Collect every output, reconnecting between tries; returns the machine (a new
    connection after a retry) and the outputs the instance did not have. ``env`` holds
    the object-store credentials that sign uploads of outputs bound for a store; a
    store's refusal counts as a failed try too (the outputs stay on the instance). No
    retry once ``still_there()`` says the instance is gone."""
    backoff = Retry(until=math.inf, first_s=FIRST_WAIT_S, max_s=MAX_WAIT_S)
    last: CloudGPUError | None = None
    for attempt in range(1, attempts + 1):
        if last is not None:
            if not still_there():
                break
            wait = backoff.wait(attempt - 1, 0.0) or FIRST_WAIT_S
            sink.info(f"collecting again in {wait:.0f} s (attempt {attempt} of {attempts})")
            sleep(wait)
            machine.close()
            try:
                machine = reconnect()
            except RemoteError as exc:
                last = exc
                sink.info(f"cannot reach the instance: {exc}")
                continue
        try:
            return machine, collect_outputs(machine, job, sink, env)
        except (RemoteError, ProviderError) as exc:
            last = exc
            sink.info(f"collecting outputs failed: {exc}")
    assert last is not None
    raise OutputsNotCollected(f"outputs not collected after {attempt} attempt(s): {last}")


def where(job: JobSpec) -> str:
    """Where the uncollected outputs are and where they were going, for the message."""
    return ", ".join(
        f"{o.src} (for {o.dst if uri.is_remote(o.dst) else local_source(job, o.dst)})"
        for o in job.outputs
    )


def declared(job: JobRecord) -> JobSpec:
    """The parts of a launched job's spec that collecting needs, from its record."""
    spec: dict[str, Any] = job.spec or {}
    outputs = tuple(
        OutputItem(str(o["src"]), str(o["dst"]), o.get("all_nodes") is True)
        for o in spec.get("outputs") or ()
        if isinstance(o, dict) and "src" in o and "dst" in o
    )
    ckpt = spec.get("checkpoint")
    return JobSpec(
        name=job.name,
        outputs=outputs,
        base_dir=str(spec.get("base_dir") or ""),
        source=job.spec_path,
        checkpoint=ckpt if isinstance(ckpt, str) else None,
    )


def node_outputs(outputs: Sequence[OutputItem], rank: int) -> tuple[OutputItem, ...]:
    """What node ``rank`` brings back: rank 0 the job's outputs, and every node those
    marked ``all_nodes``, each into its own ``DST/node-R``."""
    return tuple(
        o.for_node(rank) if o.all_nodes else o for o in outputs if o.all_nodes or rank == 0
    )


def instance_of(rec: InstanceRecord) -> Instance:
    """The Instance a record describes, to connect to it again (`ssh`, `exec`, `down`)."""
    s = rec.ssh
    target = None
    if s.get("host"):
        target = SSHTarget(
            host=s["host"],
            port=int(s.get("port", 22)),
            user=s.get("user", "root"),
            host_key_fingerprints=tuple(s.get("fingerprints", ())),
            key_file=s.get("key_file"),
            launcher=tuple(s.get("launcher", ())),
        )
    return Instance(
        id=rec.provider_id,
        provider=rec.provider,
        state=InstanceState.RUNNING,
        instance_type=rec.instance_type,
        ssh=target,
        nvme_mount=s.get("nvme", "/nvme"),
        workdir=s.get("workdir", ""),
        tags=rec.tags,
    )
