"""The ONE definition of job.yaml: every key, its form, its range and its help text.

cloudgpu.spec.load walks this tree to validate a job file, and :func:`json_schema`
generates the JSON Schema from the same tree, so `cloudgpu schema` cannot drift from
what `schema --check`, `plan` and `launch` accept. To add a key, add one line to the
block it belongs to (the value constructors are in cloudgpu.spec.fields); if the job
model needs it, give the dataclass field the same name or pass ``attr=``.

The loader is stricter than any JSON Schema can be in a few places, each marked in the
error it raises (SpecError.beyond_schema): magnitudes inside unit strings, whether a
local data path exists, GPU, provider and model names, and the workload's cross-field
rules (the planner owns those).
"""

from __future__ import annotations

import copy
import math
import posixpath
import re
from typing import Any

from cloudgpu.data import uri
from cloudgpu.spec import units
from cloudgpu.spec.fields import (
    MAX_TEXT,
    Block,
    ListOf,
    Node,
    Unchecked,
    Value,
    checked,
    choice,
    command,
    either,
    flag,
    json_schema_of,
    number,
    shown,
    text,
    unit,
)

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
ENV_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_ENV_VALUE = 100_000  # Linux refuses one environment string over 128 KiB

# -- paths -----------------------------------------------------------------------------

# Every instance path of a job (data.dst, outputs.src, checkpoint) lies under /nvme,
# which each provider maps to its scratch disk ($CLOUDGPU_NVME; a workspace dir on local).
NVME = "/nvme"
NVME_PATTERN = r"^/nvme(?:/(?!\.\.(?:/|$))[^/\x00-\x1f]*)*$"
NVME_FORM = "an absolute path under /nvme on the instance, like /nvme/data"
_NVME_RE = re.compile(NVME_PATTERN)


def _nvme_path(value: Any) -> str:
    if not isinstance(value, str) or not _NVME_RE.match(value):
        raise ValueError(f"expected {NVME_FORM}, got {shown(value)}")
    return posixpath.normpath(value)


def nvme_path(description: str) -> Value:
    return Value({"type": "string", "pattern": NVME_PATTERN}, _nvme_path, description)


# Remote data sources (s3:// gs:// az:// https://) are parsed by cloudgpu.data.uri; the
# JSON Schema states only their scheme (bucket and account rules are the loader's).
REMOTE_SOURCE_PATTERN = rf"^(?:{'|'.join(uri.SCHEMES)})://\S+$"
# PROVIDER://... : data a provider holds itself (kaggle://OWNER/DATASET). The scheme must
# name an installed provider and the job then runs only there: the loader's verdict
# checks both (spec/load.py), since only it knows the installed providers.
# Schemes that are transports or other stores' URLs, never a provider's name: refused
# here already, with the supported forms.
NOT_PROVIDERS = frozenset(
    {"http", "ftp", "ftps", "sftp", "ssh", "scp", "file", "rsync", "hdfs", "gcs", "s3a",
     "s3n", "wasb", "wasbs", "abfs", "abfss", "git", "webdav", "smb", "nfs"}
)  # fmt: skip
PROVIDER_SOURCE_PATTERN = rf"^(?!(?:{'|'.join(sorted(NOT_PROVIDERS))})://)[a-z][a-z0-9_-]*://\S+$"
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
LOCAL_SOURCE_PATTERN = r"^(?![A-Za-z][A-Za-z0-9+.-]*://)[^\x00-\x1f]*\S[^\x00-\x1f]*$"
SOURCE_FORMS = (
    "a local path, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://ACCOUNT/CONTAINER/PREFIX "
    "or https://HOST/PATH"
)


def _source(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value == "" or value is None else shown(value)
        raise ValueError(f"expected {SOURCE_FORMS}, got {got}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"expected at most {MAX_TEXT} characters, got {len(value):,}")
    m = _SCHEME_RE.match(value)
    if m is None:
        if not re.match(LOCAL_SOURCE_PATTERN, value):
            raise ValueError("expected a local path without control characters")
        return value
    if not re.match(REMOTE_SOURCE_PATTERN, value):
        if re.match(PROVIDER_SOURCE_PATTERN, value):
            return value  # a provider's own data: the verdict checks the provider
        schemes = ", ".join(s + "://" for s in uri.SCHEMES)
        raise ValueError(f"{m.group(1)}:// sources are not supported; expected one of {schemes}")
    try:
        uri.parse(value)
    except ValueError as exc:
        raise Unchecked(str(exc)) from None
    return value


SOURCE = Value(
    {
        "anyOf": [
            {"type": "string", "pattern": LOCAL_SOURCE_PATTERN, "maxLength": MAX_TEXT},
            {"type": "string", "pattern": REMOTE_SOURCE_PATTERN, "maxLength": MAX_TEXT},
            {"type": "string", "pattern": PROVIDER_SOURCE_PATTERN, "maxLength": MAX_TEXT},
        ]
    },
    _source,
    "local path (relative to the job file), s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, "
    "az://ACCOUNT/CONTAINER/PREFIX or https://HOST/PATH",
)
LOCAL_DEST_PATTERN = r"^(?![A-Za-z][A-Za-z0-9+.-]*://)[^\x00]*\S[^\x00]*$"
# Outputs may go straight from the instance to an object store (cloudgpu.data.push).
OUTPUT_SCHEMES = ("s3", "gs", "az")
REMOTE_DEST_PATTERN = rf"^(?:{'|'.join(OUTPUT_SCHEMES)})://\S+$"
DEST_FORMS = "a local path, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://ACCOUNT/CONTAINER/PREFIX"


def _dest(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value == "" or value is None else shown(value)
        raise ValueError(f"expected {DEST_FORMS}, got {got}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"expected at most {MAX_TEXT} characters, got {len(value):,}")
    if "\x00" in value:
        raise ValueError("expected a path without NUL bytes")
    m = _SCHEME_RE.match(value)
    if m is None:
        return value
    if not re.match(REMOTE_DEST_PATTERN, value):
        schemes = ", ".join(s + "://" for s in OUTPUT_SCHEMES)
        raise ValueError(
            f"outputs cannot go to {m.group(1)}://; expected a local path or {schemes}"
        )
    try:
        uri.parse(value)
    except ValueError as exc:
        raise Unchecked(str(exc)) from None
    return value


def _store_dest(value: Any) -> str:
    if isinstance(value, str) and not _SCHEME_RE.match(value):
        schemes = ", ".join(s + "://" for s in OUTPUT_SCHEMES)
        raise ValueError(f"expected an object store location ({schemes}), got {shown(value)}")
    return _dest(value)


STORE_DEST = Value(
    {"type": "string", "pattern": REMOTE_DEST_PATTERN, "maxLength": MAX_TEXT},
    _store_dest,
    "s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://ACCOUNT/CONTAINER/PREFIX the instance "
    "syncs the checkpoint to and restores it from (default: this machine)",
)

OUTPUT_DEST = Value(
    {
        "anyOf": [
            {"type": "string", "pattern": LOCAL_DEST_PATTERN, "maxLength": MAX_TEXT},
            {"type": "string", "pattern": REMOTE_DEST_PATTERN, "maxLength": MAX_TEXT},
        ]
    },
    _dest,
    "local directory (relative to the current directory), or s3://BUCKET/PREFIX, "
    "gs://BUCKET/PREFIX, az://ACCOUNT/CONTAINER/PREFIX: uploaded by the instance itself",
)

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

# -- workload (the planner interprets it; here its keys and forms are checked) ---------

KINDS = ("train", "finetune", "lora", "qlora", "inference")
PRECISIONS = ("bf16", "fp16", "fp32", "fp8", "int8", "int4")
OPTIMIZERS = ("adamw", "adam", "adam8bit", "sgd", "sgd_nomomentum")
SHARDINGS = ("auto", "ddp", "zero1", "zero2", "zero3", "fsdp")
CHECKPOINTING = ("auto", "none", "selective", "full")
# The planner's framework table (cloudgpu/planner/data/frameworks.json) has one row each.
FRAMEWORKS = (
    "auto",
    "megatron",
    "deepspeed",
    "fsdp",
    "torchtune",
    "litgpt",
    "hf-trainer",
    "nanogpt-style",
    "vllm",
    "vllm-0.2",
    "tensorrt-llm",
    "gpt-fast",
    "hf-generate",
)


def _whole(description: str, lo: int, hi: float) -> Value:
    return checked(number(description, lo, hi, integer=True, lo_open=False))


def _whole_or_auto(description: str, hi: float) -> Value:
    """A whole number >= 1, or ``auto``: the planner searches it per machine."""
    return checked(
        either(
            description,
            number("", 1, hi, integer=True, lo_open=False),
            choice("", ("auto",)),
        )
    )


def _rate(description: str, hi: float) -> Value:
    return checked(number(description, 0, hi, lo_open=False))


def _amount(description: str, hi: float) -> Value:
    return checked(
        unit(description, units.parse_amount, units.AMOUNT_PATTERN, 0, hi, units.AMOUNT_FORM)
    )


def _bytes(description: str, hi: float) -> Value:
    return checked(
        unit(description, units.parse_bytes, units.BYTES_PATTERN, 0, hi, units.BYTES_FORM)
    )


def _pick(description: str, options: tuple[str, ...], **kw: Any) -> Value:
    return checked(choice(description, options, loose=True, **kw))


ARCH: dict[str, Value] = {
    "layers": _whole("transformer blocks", 1, 100_000),
    "hidden": _whole("model width", 1, 10_000_000),
    "heads": _whole("attention heads", 1, 100_000),
    "kv_heads": _whole("key/value heads (GQA)", 1, 100_000),
    "vocab": _whole("vocabulary size", 1, 1e9),
    "intermediate": _whole("MLP width", 1, 1e8),
    "head_dim": _whole("per-head width", 0, 100_000),
    "experts": _whole("MoE experts", 1, 100_000),
    "experts_active": _whole("experts per token", 1, 100_000),
    "tied": flag("tied input/output embeddings"),
}

WORKLOAD = Block(
    {
        "kind": _pick("train | finetune | lora | qlora | inference", KINDS),
        "model": checked(text("a bundled model, e.g. llama-3-8b", max_len=200)),
        "params": _amount("parameter count, e.g. 8B", 1e15),
        "tokens": _amount("tokens to train on (or to generate), e.g. 2B", 1e17),
        "precision": _pick("bf16 | fp16 | fp32 | fp8 | int8 | int4", PRECISIONS),
        "seq_len": _whole("sequence length / context", 1, 100_000_000),
        "framework": _pick(
            "what runs the job, for its efficiency and memory habits: " + " | ".join(FRAMEWORKS),
            FRAMEWORKS,
        ),
        "global_batch": _whole_or_auto("sequences per optimizer step", 1e9),
        "micro_batch": _whole_or_auto("sequences per GPU per step", 1_000_000),
        "grad_accum": _whole_or_auto("micro-steps per optimizer step", 1_000_000),
        "checkpointing": _pick(
            "activation recomputation", CHECKPOINTING, booleans={True: "full", False: "none"}
        ),
        "attention": _pick("flash | eager", ("flash", "eager")),
        "optimizer": _pick("adamw | adam | adam8bit | sgd | sgd_nomomentum", OPTIMIZERS),
        "sharding": _pick("auto | ddp | zero1 | zero2 | zero3 | fsdp", SHARDINGS),
        "tensor_parallel": _whole_or_auto("tensor-parallel degree inside a node", 1024),
        "pipeline_parallel": _whole_or_auto("pipeline stages (across nodes when searched)", 1024),
        "virtual_pipeline": _whole_or_auto("interleaved pipeline chunks per stage", 1024),
        "context_parallel": _whole("GPUs each sequence is split over", 1, 1024),
        "network_gbps": checked(
            either(
                "node-to-node Gbit/s the estimate assumes (auto: the offer's)",
                number("", 0, 1e7),
                choice("", ("auto",)),
            )
        ),
        "lora_rank": _whole("adapter rank (lora/qlora)", 1, 65_536),
        "lora_targets": _pick("all | attention | qv", ("all", "attention", "qv")),
        "mfu": checked(number("measured end-to-end model FLOPs utilisation, a fraction", 0, 1)),
        "batch": checked(
            either(
                "concurrent sequences (inference)",
                number("", 1, 1_000_000, integer=True, lo_open=False),
                choice("", ("auto",)),
            )
        ),
        "requests": _amount("requests to serve (inference)", 1e15),
        "input_tokens": _whole("prompt tokens per request", 0, 100_000_000),
        "output_tokens": _whole("generated tokens per request", 0, 100_000_000),
        "data_size": _bytes("bytes to stage when the data block's size is unknown", 1e18),
        "samples_per_s": _rate("samples one GPU consumes per second", 1e9),
        "bytes_per_sample": _bytes("size of one sample", 1e12),
        "cpu_samples_per_s": _rate("samples one vCPU decodes per second", 1e9),
        "spot_interruptions_per_hour": _rate("expected spot interruptions per hour", 100),
        "checkpoint_minutes": _rate("minutes between checkpoints", 1e6),
        "arch": Block(
            {"name": checked(text("a label", max_len=200)), **ARCH},
            description="the model's shape, instead of model: or params:",
        ),
        **ARCH,
    },
    required=("kind",),
    description="sizes and times the job (see `cloudgpu plan --help`)",
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
