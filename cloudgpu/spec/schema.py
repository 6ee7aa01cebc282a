"""The ONE definition of job.yaml: every key, its form, its range and its help text.

cloudgpu.spec.load walks this tree to validate a job file, and :func:`json_schema`
generates the JSON Schema from the same tree, so `cloudgpu schema` cannot drift from
what `schema --check`, `plan` and `launch` accept. To add a key, add one line to the
block it belongs to (the value constructors are in cloudgpu.spec.fields); if the job
model needs it, give the dataclass field the same name or pass ``attr=``. Two parts of
the tree live beside it: the workload block (cloudgpu.spec.workload) and the values that
name places: instance paths, data sources and destinations (cloudgpu.spec.locations).

The loader is stricter than any JSON Schema can be in a few places, each marked in the
error it raises (SpecError.beyond_schema): magnitudes inside unit strings, whether a
local data path exists, GPU, provider and model names, and the workload's cross-field
rules (the planner owns those).
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from cloudgpu.spec import units
from cloudgpu.spec.fields import (
    Block,
    ListOf,
    Node,
    Value,
    choice,
    command,
    flag,
    json_schema_of,
    number,
    shown,
    text,
    unit,
)
from cloudgpu.spec.locations import OUTPUT_DEST, SOURCE, STORE_DEST, nvme_path
from cloudgpu.spec.workload import WORKLOAD

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
ENV_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_ENV_VALUE = 100_000  # Linux refuses one environment string over 128 KiB

# -- resources, limits -------------------------------------------------------------------


def _gpu_value() -> Value:
    schema = {
        "anyOf": [
            {"type": "string", "pattern": units.GPU_PATTERN, "maxLength": 200},
            {"enum": [0, False, None]},
        ]
    }
    description = (
        'GPU model and count: "A100-80GB:8", "H100", "24GB+", "any", "none"; '
        "omitted: the job needs no GPU"
    )
    return Value(schema, units.parse_gpu, description)


def _size(description: str, hi: float, attr: str, **kw: Any) -> Value:
    return unit(
        description, units.parse_size_gb, units.SIZE_PATTERN, 0, hi, units.SIZE_FORM,
        attr=attr, **kw,
    )  # fmt: skip


def _duration(description: str, hi_days: float, attr: str) -> Value:
    return unit(
        description,
        units.parse_duration_s,
        units.DURATION_PATTERN,
        0,
        hi_days * 86400,
        units.DURATION_FORM,
        numbers=False,
        lo_open=True,
        attr=attr,
    )


def _disk_gb(gb: float) -> int:
    return max(1, round(gb))


RESOURCES = Block(
    {
        "gpu": _gpu_value(),
        "cpus": unit(
            'minimum vCPUs, e.g. "16+"',
            units.parse_min_count,
            units.COUNT_PATTERN,
            0,
            10_000,
            units.COUNT_FORM,
            lo_open=True,
        ),
        "memory": _size('minimum RAM, e.g. "128GB+"', 100_000, "memory_gb"),
        "local_nvme": _size('minimum instance-local NVMe, e.g. "500GB+"', 1e6, "local_nvme_gb"),
        "disk": _size(
            'boot disk size, e.g. "200GB"', 65_536, "disk_gb", lo_open=True, convert=_disk_gb
        ),
        "spot": choice(
            "true | false | auto",
            ("true", "false", "auto"),
            booleans={True: "true", False: "false"},
        ),
        "max_price": number("USD per instance-hour", 0, 10_000, unit="USD/hour"),
        "providers": ListOf(
            text(form="a provider name like aws", max_len=100),
            "restrict to these providers",
            scalar_ok=True,
        ),
        "regions": ListOf(
            text(form='a region glob like "us-*"', max_len=200),
            'region globs, e.g. ["us-*"]',
            scalar_ok=True,
        ),
        "image": text("provider image id or family"),
        "retry": _duration(
            'retry the ranked offers this long while none has capacity, e.g. "2h"', 30, "retry_s"
        ),
    },
    description="what the machine needs",
)

LIMITS = Block(
    {
        "max_runtime": _duration('stop the job after this long, e.g. "6h"', 365, "max_runtime_s"),
        "max_cost": number("USD for the whole job", 0, 10_000_000, unit="USD"),
        "idle_timeout": _duration(
            'tear down a kept instance idle this long, e.g. "10m"', 30, "idle_timeout_s"
        ),
        "max_preemptions": number(
            "spot preemptions before giving up (spot: auto then goes on demand); default 5",
            0,
            1000,
            integer=True,
            lo_open=False,
        ),
    },
    description="the job is stopped when one is reached",
)

CHECKPOINT = Block(
    {
        "path": nvme_path("directory on the instance, e.g. /nvme/ckpt"),
        "sync_every": _duration(
            'copied back this often while the job runs, default "5m"', 30, "sync_every"
        ),
        "dst": STORE_DEST,
    },
    required=("path",),
    description="directory kept across preemptions: a path, or {path, sync_every, dst}",
    scalar_key="path",
)

# -- the job -------------------------------------------------------------------------------


def _copy(src: Value, dst: Value, description: str, **more: Node) -> ListOf:
    return ListOf(Block({"src": src, "dst": dst, **more}, required=("src", "dst")), description)


# A data item: a copy plus what to leave out and how to move it (cloudgpu.data).
DATA_ITEM_EXTRA: dict[str, Node] = {
    "exclude": ListOf(
        text(form="a gitignore-style pattern", max_len=1000),
        "gitignore-style patterns to leave out (also read: .cloudgpuignore)",
        scalar_ok=True,
    ),
    "pack": flag("local trees: send many small files as large shards, unpacked in parallel"),
    "workers": number(
        "remote sources: objects fetched at once on the instance (default 32)",
        1,
        256,
        integer=True,
        lo_open=False,
    ),
}


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float) and math.isfinite(value):
        return str(value)
    if isinstance(value, str) and "\x00" not in value and len(value) <= MAX_ENV_VALUE:
        return value
    if isinstance(value, str):
        raise ValueError(f"expected at most {MAX_ENV_VALUE:,} characters and no NUL byte")
    raise ValueError(f"expected a text, number or true/false value, got {shown(value)}")


ENV = Block(
    values=Value(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^[^\x00]*$", "maxLength": MAX_ENV_VALUE},
                {"type": ["number", "boolean"]},
            ]
        },
        _env_value,
    ),
    key_pattern=ENV_PATTERN,
    key_form="a variable name like WANDB_MODE",
    description="environment variables of setup and run (nothing else is passed on)",
)

MAX_NODES = 64
NODES_RANGE = r"^\s*([1-9][0-9]*)\s*-\s*([1-9][0-9]*)\s*$"
_NODES_RE = re.compile(NODES_RANGE)


def _nodes(value: Any) -> tuple[int, int]:
    """``num_nodes: 4`` -> (4, 4); ``num_nodes: "1-4"`` -> (1, 4): the planner picks."""
    form = f'a whole number 1..{MAX_NODES} or a range like "1-4"'
    if isinstance(value, int) and not isinstance(value, bool):
        lo = hi = value
    elif isinstance(value, str) and (m := _NODES_RE.match(value)):
        lo, hi = int(m.group(1)), int(m.group(2))
    else:
        raise ValueError(f"expected {form}, got {shown(value)}")
    if not 1 <= lo <= hi <= MAX_NODES:
        raise ValueError(f"expected {form} (low <= high <= {MAX_NODES}), got {shown(value)}")
    return lo, hi


NUM_NODES = Value(
    {
        "anyOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_NODES},
            {"type": "string", "pattern": NODES_RANGE},
        ]
    },
    _nodes,
    "nodes (instances of one offer, started with torchrun's rendezvous variables); "
    'a range "1-4" lets the planner choose by total cost',
)

JOB = Block(
    {
        "name": text(
            "the job's name",
            pattern=NAME_PATTERN,
            form="lowercase letters, digits and '-' (max 63)",
        ),
        "resources": RESOURCES,
        "workload": WORKLOAD,
        "data": _copy(
            SOURCE,
            nvme_path("where it lands on the instance"),
            "local paths or s3:// gs:// az:// https:// sources, pulled onto /nvme",
            **DATA_ITEM_EXTRA,
        ),
        "setup": command("shell run once before `run`"),
        "run": command("the job's command (bash)"),
        "outputs": _copy(
            nvme_path("instance directory to bring back"),
            OUTPUT_DEST,
            "instance paths brought back (or uploaded to an object store) after the run",
            all_nodes=flag(
                "multi-node jobs: bring it back from every node, each into DST/node-R "
                "(default: from rank 0 only)"
            ),
        ),
        "env": ENV,
        "limits": LIMITS,
        "checkpoint": CHECKPOINT,
        "num_nodes": NUM_NODES,
    },
    required=("name", "run"),
    extensions=True,
)

# Key sets the lifecycle and planner read (kept for callers of the old names).
TOP = JOB.keys
REQUIRED = JOB.required
COPY_KEYS = ("src", "dst")


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a job file, generated from :data:`JOB`."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://cloudgpu.dev/schema/job.json",
        "title": "cloudgpu job",
        **copy.deepcopy(json_schema_of(JOB)),
    }
