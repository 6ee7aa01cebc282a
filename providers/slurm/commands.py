"""Slurm command lines and the parsing of their output: pure functions, no I/O.

Formats are those of the man pages of Slurm 22.05 (sinfo(1), squeue(1), sbatch(1),
srun(1), scontrol(1)); every query asks for ``|``-separated fields with ``-h`` (no
header) so nothing depends on column widths. Times are printed in UTC: the commands run
with ``TZ=UTC0``, and Slurm formats times with the C library's localtime.

The cluster-side record of a cloudgpu job is the Slurm job's ``--comment``:
``cloudgpu;key=value;...`` with percent-encoded values (tags, node record ids, the
idempotency token, the offer), so `down --orphans` finds what a crash left by listing
the user's jobs. Nothing secret is ever put there: comments are visible to other users.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, unquote

COMMENT_PREFIX = "cloudgpu;"
HOLD = "sleep 2147483647"  # the batch step only holds the allocation; steps run via srun
SINFO = "sinfo -h -N -o '%R|%N|%o|%c|%m|%G|%t|%d'"
_SQUEUE_FMT = "'%i|%T|%D|%N|%S|%r|%k'"
SQUEUE_MINE = f"TZ=UTC0 squeue --me -h -o {_SQUEUE_FMT}"
_GRES_RE = re.compile(r"gpu(?::([^:(,]+))?:(\d+)")

# squeue/sacct job states (squeue(1) JOB STATE CODES) -> what the contract calls them.
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESIZING"})
RUNNING_STATES = frozenset({"RUNNING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
STOPPING_STATES = frozenset({"COMPLETING", "REQUEUE_FED", "RESV_DEL_HOLD"})
LOST_STATES = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
# Pending reasons (squeue(1) JOB REASON CODES) under which the job can never start as
# asked, and those under which it waits for others to finish.
NEVER_REASONS = (
    "PartitionDown",
    "PartitionInactive",
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "ReqNodeNotAvail",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "QOSNotAllowed",
)
BUSY_REASONS = ("Resources", "Priority", "Reservation", "QOS", "Assoc", "JobHeldUser")


@dataclass(frozen=True)
class NodeRow:
    partition: str
    name: str
    address: str
    cpus: int
    memory_mb: int
    gres: str
    state: str
    tmp_mb: int

    @property
    def free(self) -> bool:
        return self.state.rstrip("*~#!%$@^-") == "idle"

    @property
    def usable(self) -> bool:
        """Up and schedulable: idle, mixed or allocated (not down, drained, failing)."""
        return self.state.rstrip("*~#!%$@^-") in ("idle", "mix", "alloc", "comp")


@dataclass(frozen=True)
class JobRow:
    job_id: str
    state: str
    num_nodes: int
    nodelist: str
    start: float | None  # unix seconds
    reason: str
    tags: Mapping[str, str]  # decoded comment


def parse_sinfo(text: str) -> list[NodeRow]:
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 8:
            continue
        part, name, addr, cpus, mem, gres, state, tmp = parts
        try:
            rows.append(NodeRow(part, name, addr, int(cpus), int(mem), gres, state, _int(tmp)))
        except ValueError:
            continue  # a row we cannot read is skipped, never guessed
    return rows


def _int(text: str) -> int:
    return int(text) if text.strip().isdigit() else 0


def gpu_gres(gres: str) -> list[tuple[str, int]]:
    """(type, count) of each GPU GRES of a node: ``gpu:a100:4(S:0-1),gpu:2`` ->
    [("a100", 4), ("", 2)]; an untyped GRES has type ""."""
    if not gres or gres == "(null)":
        return []
    return [(m.group(1) or "", int(m.group(2))) for m in _GRES_RE.finditer(gres)]


def encode_comment(fields: Mapping[str, str]) -> str:
    items = [f"{quote(k, safe='')}={quote(v, safe='@.-_:+,')}" for k, v in fields.items()]
    return COMMENT_PREFIX + ";".join(items)


def decode_comment(comment: str) -> dict[str, str] | None:
    """The fields of a cloudgpu comment; None for any other job's comment."""
    if not comment.startswith(COMMENT_PREFIX):
        return None
    out = {}
    for item in comment[len(COMMENT_PREFIX) :].split(";"):
        key, sep, value = item.partition("=")
        if sep:
            out[unquote(key)] = unquote(value)
    return out


def parse_squeue(text: str) -> list[JobRow]:
    """Our jobs (comment-tagged) from squeue's ``%i|%T|%D|%N|%S|%r|%k`` lines."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|", 6)
        if len(parts) != 7:
            continue
        jid, state, nodes, nodelist, start, reason, comment = parts
        tags = decode_comment(comment)
        if tags is None or not jid.isdigit():
            continue
        rows.append(JobRow(jid, state, _int(nodes) or 1, nodelist, _utc(start), reason, tags))
    return rows


def _utc(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None  # "N/A", "Unknown": not started


def squeue_job(job_id: str) -> str:
    return f"TZ=UTC0 squeue -h -t all -j {int(job_id)} -o {_SQUEUE_FMT}"


def sacct_job(job_id: str) -> str:
    """Final state of a job squeue has forgotten (MinJobAge); needs accounting storage."""
    return f"sacct -n -P -X -j {int(job_id)} -o State"


def time_limit(seconds: float) -> str:
    """sbatch --time as minutes, rounded up (Slurm's unit), at least one."""
    return str(max(1, math.ceil(seconds / 60)))


@dataclass(frozen=True)
class Shape:
    """What one node of a job asks for, from the offer's instance type and extras."""

    partition: str
    gpu_type: str  # "" for untyped GRES; "cpu" for CPU-only
    gpus: int
    cpus: int
    memory_mb: int
    whole_node: bool


def sbatch(
    shape: Shape,
    *,
    name: str,
    comment: str,
    nodes: int,
    time_s: float,
    account: str = "",
    qos: str = "",
    extra: Sequence[str] = (),
) -> str:
    args = [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--comment={comment}",
        f"--partition={shape.partition}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--time={time_limit(time_s)}",
        "--output=/dev/null",
        "--open-mode=append",
    ]
    if shape.gpus and shape.gpu_type != "cpu":
        kind = f"gpu:{shape.gpu_type}" if shape.gpu_type else "gpu"
        args.append(f"--gres={kind}:{shape.gpus}")
    if shape.whole_node:
        args += ["--exclusive", "--mem=0"]
    else:
        args += [f"--cpus-per-task={max(1, shape.cpus)}", f"--mem={max(1, shape.memory_mb)}M"]
    if account:
        args.append(f"--account={account}")
    if qos:
        args.append(f"--qos={qos}")
    args += list(extra)
    args.append(f"--wrap={HOLD}")
    return shlex.join(args)


def parse_job_id(stdout: str) -> str | None:
    """sbatch --parsable prints ``jobid`` or ``jobid;cluster``."""
    first = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    jid = first.split(";", 1)[0].strip()
    return jid if jid.isdigit() else None


def launcher(job_id: str, node: str) -> tuple[str, ...]:
    """The argv that runs a command on one node of the job's allocation (a job step
    sharing the allocation with the holding batch step). Unbuffered: srun otherwise
    forwards output line by line, which stalls the transfer agent's binary stream."""
    return (
        "srun",
        f"--jobid={int(job_id)}",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--quiet",
        "--unbuffered",
    )


def scratch_dir(scratch: str, job_id: str) -> str:
    return f"{scratch.rstrip('/')}/cloudgpu-{int(job_id)}"


def on_every_node(job_id: str, nodes: int, script: str) -> str:
    """Run ``script`` once on each node of the job (srun, one task per node)."""
    return shlex.join(
        [
            "srun",
            f"--jobid={int(job_id)}",
            "--overlap",
            f"--nodes={nodes}",
            "--ntasks-per-node=1",
            "--quiet",
            "sh",
            "-c",
            script,
        ]
    )


def node_facts(job_id: str, nodelist: str, nodes: int, scratch: str) -> str:
    """One login-node script printing ``node|NAME``, ``addr|NAME|ADDRESS`` and, when the
    scratch path needs a node's shell to expand it, ``scratch|NAME|PATH`` lines."""
    nl = shlex.quote(nodelist)
    script = f"scontrol show hostnames {nl} | sed 's/^/node|/'; sinfo -h -N -n {nl} -o 'addr|%N|%o'"
    if "$" in scratch:
        # Validated in settings: variables only, no quotes or command substitution.
        inner = f'printf "scratch|%s|%s\\n" "$SLURMD_NODENAME" "{scratch_dir(scratch, job_id)}"'
        script += "; " + on_every_node(job_id, nodes, inner)
    return script


def parse_node_facts(text: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    nodes: list[str] = []
    addrs: dict[str, str] = {}
    scratch: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if parts[0] == "node" and len(parts) == 2 and parts[1]:
            nodes.append(parts[1])
        elif parts[0] == "addr" and len(parts) == 3:
            addrs.setdefault(parts[1], parts[2])
        elif parts[0] == "scratch" and len(parts) == 3 and parts[2].startswith("/"):
            scratch[parts[1]] = parts[2]
    return nodes, addrs, scratch


def cleanup(job_id: str, nodes: int, scratch: str) -> str:
    """Remove the job's scratch dir on every node (before the job is cancelled)."""
    return on_every_node(job_id, nodes, f'rm -rf "{scratch_dir(scratch, job_id)}"')


def scancel(job_id: str) -> str:
    return f"scancel {int(job_id)}"
