"""The slurm provider: jobs on an existing Slurm cluster, submitted through its login node.

Everything goes over SSH to the login node (sbatch, squeue, sacct, scancel, sinfo,
srun); no Slurm REST API is needed. An "instance" is one node of a Slurm job whose batch
step only holds the allocation (``sleep``); the lifecycle's commands and transfers run
on that node as job steps (``srun --jobid J --overlap --nodelist NODE``) through the
login node, which SSHTarget.launcher expresses, so the lifecycle needs nothing special.
A multi-node job is one Slurm job of N nodes (gang-scheduled by Slurm itself); node i
is instance ``slurm-J-i``. Data goes to node-local scratch (``scratch`` setting,
default ``${TMPDIR:-/tmp}``), in ``cloudgpu-J``, which terminate removes on every node
before ``scancel``. The deadline is Slurm's own ``--time`` limit. Orphans are found by
the job comment (see commands.py), the job name is the lifecycle's instance name.

Nodes belong to the user's cluster: never disposable (no formatting, no power-off).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from cloudgpu_providers.slurm import commands as cmd
from cloudgpu_providers.slurm.login import NAME, LoginNode, slurm_error
from cloudgpu_providers.slurm.offers import offers_from_sinfo, shape_of
from cloudgpu_providers.slurm.settings import Settings, key_file, parse

from cloudgpu import atomicfile
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import CapacityError, ConfigError, QuotaError
from cloudgpu.provider import (
    TAG_INSTANCE,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
    SSHTarget,
)

OFFERS_TTL_S = 60.0  # sinfo answers are reused this long (plan, then launch)
SETTLE_S = 5.0  # after sbatch: how long to watch for "never starts" / "busy"
CANCEL_WAIT_S = 120.0  # Slurm's KillWait (30 s by default) and the epilog, with margin
_ID_RE = re.compile(r"^slurm-(\d+)-(\d+)$")


@dataclass
class _Facts:
    """Where a running job's nodes are: names in rank order, addresses, scratch dirs."""

    nodes: list[str] = field(default_factory=list)
    addrs: dict[str, str] = field(default_factory=dict)
    scratch: dict[str, str] = field(default_factory=dict)


def _state(row: cmd.JobRow) -> InstanceState:
    s = row.state.split()[0] if row.state else ""
    if s in cmd.PENDING_STATES:
        return InstanceState.PENDING
    if s in cmd.RUNNING_STATES:
        return InstanceState.RUNNING
    if s in cmd.STOPPING_STATES:
        return InstanceState.STOPPING
    if s in cmd.LOST_STATES:
        return InstanceState.PREEMPTED
    return InstanceState.TERMINATED


class SlurmProvider(Provider):
    name: ClassVar[str] = NAME
    capabilities: ClassVar[Capabilities] = Capabilities(
        multi_node=True,
        billing_granularity_s=1,
    )

    # -- settings and the login node -------------------------------------------------

    @cached_property
    def settings(self) -> Settings | None:
        return parse(self.ctx.config)

    def _settings(self) -> Settings:
        s = self.settings
        if s is None:
            raise ConfigError('providers.slurm: no login node (host = "...") configured')
        return s

    @cached_property
    def pinned(self) -> list[str]:
        return []  # host keys pinned on first use, said out loud by check()

    @cached_property
    def login_target(self) -> SSHTarget:
        s = self._settings()
        home = Path(self.ctx.env.get("HOME") or Path.home())
        return SSHTarget(
            host=s.host,
            port=s.port,
            user=s.user,
            host_key_fingerprints=(s.host_key,) if s.host_key else (),
            key_file=key_file(s, home),
        )

    @cached_property
    def login(self) -> LoginNode:
        return LoginNode(
            self.login_target,
            self.ctx.paths.data_dir / "known_hosts",
            on_new_host_key=lambda label, fp: self.pinned.append(f"pinned {label} {fp}"),
        )

    @property
    def _dir(self) -> Path:
        return self.ctx.paths.data_dir / "slurm"

    def availability(self) -> Availability:
        s = self.settings
        if s is None:
            return Availability(False, 'no login node configured ([providers.slurm] host = "...")')
        return Availability(
            True,
            f"cluster {s.region} via login node {s.user}@{s.host}",
            ("config:providers.slurm",),
        )

    def check(self) -> Availability:
        av = self.availability()
        if not av.enabled:
            return av
        rows = cmd.parse_sinfo(self.login.check(cmd.SINFO))
        parts = sorted({r.partition for r in rows})
        reason = f"{av.reason}: {len(rows)} node(s) in partition(s) {', '.join(parts) or '-'}"
        return Availability(True, "; ".join([reason, *self.pinned]), av.sources)

    # -- offers ----------------------------------------------------------------------

    def offers(self) -> list[Offer]:
        cache = self.ctx.paths.cache_dir / "slurm-sinfo.json"
        held = atomicfile.read_json(cache)
        now = self.ctx.clock()
        if held and isinstance(held.get("at"), float) and 0 <= now - held["at"] < OFFERS_TTL_S:
            text = str(held.get("sinfo", ""))
        else:
            text = self.login.check(cmd.SINFO)
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomicfile.write_json(cache, {"at": now, "sinfo": text})
        return self._offers(text, now)

    def fetch_offers(self) -> list[Offer]:
        return self._offers(self.login.check(cmd.SINFO), self.ctx.clock())

    def _offers(self, sinfo: str, now: float) -> list[Offer]:
        rows = cmd.parse_sinfo(sinfo)
        return offers_from_sinfo(rows, self._settings(), load_registry(), iso_utc(now))

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        return self.create_nodes([request])[0]

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        """All nodes of one job as one Slurm job: Slurm allocates all of them or none."""
        first = requests[0]
        n = len(requests)
        if first.idempotency_token:
            for row in self._mine():
                if row.tags.get("token") == first.idempotency_token:
                    return [self._instance(row, i) for i in range(row.num_nodes)]
        s = self._settings()
        now = self.ctx.clock()
        fields = {k: v for k, v in first.tags.items() if k != TAG_INSTANCE}
        fields[TAG_INSTANCE] = ",".join(r.tags.get(TAG_INSTANCE, "") for r in requests)
        fields.update(
            token=first.idempotency_token,
            type=first.offer.instance_type,
            price=f"{first.offer.price_per_hour:g}",
        )
        line = cmd.sbatch(
            shape_of(first.offer),
            name=first.name,
            comment=cmd.encode_comment(fields),
            nodes=n,
            time_s=(first.deadline - now) if first.deadline else s.max_time_s,
            account=s.account,
            qos=s.qos,
            extra=s.sbatch_args,
        )
        job_id = cmd.parse_job_id(self.login.check(line))
        if job_id is None:
            raise slurm_error("sbatch", 1, "sbatch printed no job id")
        row = self._settle(job_id, first.offer)
        return [self._instance(row, i) for i in range(n)]

    def _settle(self, job_id: str, offer: Offer) -> cmd.JobRow:
        """Watch a new job briefly: cancel it (and say why) when it can never start, or
        when it would queue and ``when_busy = "fail"``; else return its row."""
        waited = 0.0
        row = None
        while waited < SETTLE_S:
            row = self._row(job_id)
            if row is None or _state(row) != InstanceState.PENDING:
                break
            reason = row.reason
            never = any(reason.startswith(r) for r in cmd.NEVER_REASONS)
            busy = any(reason.startswith(r) for r in cmd.BUSY_REASONS)
            if never or (busy and self._settings().when_busy == "fail"):
                self.login.run(cmd.scancel(job_id))
                where = f"partition {offer.zone} of {offer.region}"
                if never:
                    raise CapacityError(f"{where}: job would never start ({reason})", provider=NAME)
                err = QuotaError if reason.startswith(("QOS", "Assoc")) else CapacityError
                raise err(
                    f"{where}: no free node now ({reason})",
                    provider=NAME,
                    hint='set when_busy = "queue" under [providers.slurm] to wait in the queue',
                )
            if busy:
                break  # queued, as configured
            self.ctx.sleep(0.25)
            waited += 0.25
        if row is None:
            raise slurm_error("squeue", 1, f"job {job_id} vanished right after sbatch")
        return row

    def _row(self, job_id: str) -> cmd.JobRow | None:
        rc, out, err = self.login.run(cmd.squeue_job(job_id))
        if rc != 0:
            if "Invalid job id" in err:
                return None
            raise slurm_error("squeue", rc, err)
        rows = [r for r in cmd.parse_squeue(out) if r.job_id == job_id]
        return rows[0] if rows else None

    def _mine(self) -> list[cmd.JobRow]:
        return cmd.parse_squeue(self.login.check(cmd.SQUEUE_MINE))

    def _gone_state(self, job_id: str) -> InstanceState:
        """A job squeue no longer knows: sacct says whether it was lost to a node
        failure or preemption; without accounting storage it is simply terminated."""
        rc, out, _ = self.login.run(cmd.sacct_job(job_id))
        state = out.split()[0] if rc == 0 and out.split() else ""
        return InstanceState.PREEMPTED if state in cmd.LOST_STATES else InstanceState.TERMINATED

    def describe(self, instance_id: str) -> Instance:
        m = _ID_RE.match(instance_id)
        if m is None:
            return Instance(instance_id, NAME, InstanceState.TERMINATED)
        job_id, rank = m.group(1), int(m.group(2))
        row = self._row(job_id)
        if row is None:
            return Instance(instance_id, NAME, self._gone_state(job_id))
        if rank >= row.num_nodes:
            return Instance(instance_id, NAME, InstanceState.TERMINATED)
        return self._instance(row, rank)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        out = []
        for row in self._mine():
            if _state(row).is_gone:
                continue
            for rank in range(row.num_nodes):
                inst = self._instance(row, rank)
                if all(inst.tags.get(k) == v for k, v in tags.items()):
                    out.append(inst)
        return out

    def terminate(self, instance_id: str) -> None:
        """Cancel the node's Slurm job (every node of it), its scratch removed first."""
        m = _ID_RE.match(instance_id)
        if m is None:
            return
        job_id = m.group(1)
        row = self._row(job_id)
        if row is None or _state(row).is_gone:
            return
        if _state(row) == InstanceState.RUNNING:
            # Best effort: a node that cannot run the cleanup is cancelled regardless.
            self.login.run(cmd.cleanup(job_id, row.num_nodes, self._settings().scratch), 60)
        out = self.login.run(cmd.scancel(job_id))
        if out[0] != 0 and "Invalid job id" not in out[2]:
            raise slurm_error("scancel", out[0], out[2])
        (self._dir / f"job-{job_id}.json").unlink(missing_ok=True)
        # Verified, not just asked for: COMPLETING lasts while slurmd kills the steps.
        waited = 0.0
        while (row := self._row(job_id)) is not None and not _state(row).is_gone:
            if waited >= CANCEL_WAIT_S:
                raise slurm_error("scancel", 1, f"job {job_id} still {row.state} after scancel")
            self.ctx.sleep(0.25)
            waited += 0.25

    # -- instance records ------------------------------------------------------------

    def _facts(self, row: cmd.JobRow) -> _Facts:
        path = self._dir / f"job-{row.job_id}.json"
        held = atomicfile.read_json(path)
        if held and len(held.get("nodes", ())) == row.num_nodes:
            return _Facts(list(held["nodes"]), dict(held["addrs"]), dict(held["scratch"]))
        s = self._settings()
        text = self.login.check(cmd.node_facts(row.job_id, row.nodelist, row.num_nodes, s.scratch))
        nodes, addrs, scratch = cmd.parse_node_facts(text)
        facts = _Facts(nodes, addrs, scratch)
        if len(nodes) == row.num_nodes and ("$" not in s.scratch or len(scratch) == len(nodes)):
            path.parent.mkdir(parents=True, exist_ok=True)
            atomicfile.write_json(path, {"nodes": nodes, "addrs": addrs, "scratch": scratch})
        return facts

    def _instance(self, row: cmd.JobRow, rank: int) -> Instance:
        s = self._settings()
        state = _state(row)
        recs = row.tags.get(TAG_INSTANCE, "").split(",")
        tags: dict[str, str] = {
            k: v for k, v in row.tags.items() if k.startswith("cloudgpu-") and k != TAG_INSTANCE
        }
        if rank < len(recs) and recs[rank]:
            tags[TAG_INSTANCE] = recs[rank]
        extra: dict[str, Any] = {"job_id": row.job_id, "rank": rank, "reason": row.reason}
        ssh, nvme, address = None, cmd.scratch_dir(s.scratch, row.job_id), ""
        if state == InstanceState.RUNNING:
            facts = self._facts(row)
            if rank < len(facts.nodes):
                node = facts.nodes[rank]
                ssh = SSHTarget(
                    host=self.login_target.host,
                    port=self.login_target.port,
                    user=self.login_target.user,
                    host_key_fingerprints=self.login_target.host_key_fingerprints,
                    key_file=self.login_target.key_file,
                    launcher=cmd.launcher(row.job_id, node),
                )
                nvme = facts.scratch.get(node, nvme)
                address = facts.addrs.get(node) or node
                extra["node"] = node
        return Instance(
            id=f"slurm-{row.job_id}-{rank}",
            provider=NAME,
            state=state,
            instance_type=row.tags.get("type", ""),
            region=s.region,
            zone=row.tags.get("type", "").split(":", 1)[0],
            ssh=ssh,
            tags=tags,
            price_per_hour=_float(row.tags.get("price", "")),
            launched_at=row.start if state != InstanceState.PENDING else None,
            nvme_mount=nvme,
            private_address=address,
            extra=extra,
        )


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0
