"""The JSON Schema of job.yaml, and the key sets the validator checks against.

This is the one place the job file's keys are listed: cloudgpu.spec.load takes its
allowed and required keys from here, so `cloudgpu schema` cannot drift from what the
loader accepts. The schema is for editors (yaml-language-server); the loader is stricter
(it parses sizes, durations and GPU forms and checks that data paths exist).
"""

from __future__ import annotations

import copy
from typing import Any

_SIZE = {"type": ["string", "number"], "pattern": r"^\s*\d+(\.\d+)?\s*[A-Za-z]*\s*\+?\s*$"}
_DURATION = {"type": "string", "pattern": r"^(\d+(\.\d+)?\s*[dhms]\s*)+$"}
_MIN_COUNT = {"type": ["string", "number"], "pattern": r"^\s*\d+(\.\d+)?\s*\+?\s*$"}
_STR_LIST = {"type": "array", "items": {"type": "string"}}
_COPY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["src", "dst"],
    "properties": {"src": {"type": "string"}, "dst": {"type": "string"}},
}
# A data item: a copy plus what to leave out and how to move it (cloudgpu.data).
DATA_ITEM: dict[str, Any] = {
    "src": {
        "type": "string",
        "description": "local path, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, "
        "az://ACCOUNT/CONTAINER/PREFIX or https://HOST/PATH",
    },
    "dst": {"type": "string", "description": "path on the instance, e.g. /nvme/data"},
    "exclude": {
        "type": ["string", "array"],
        "items": {"type": "string"},
        "description": "gitignore-style patterns to leave out (also read: .cloudgpuignore)",
    },
    "pack": {
        "type": "boolean",
        "description": "local trees: send many small files as large shards, unpacked in parallel",
    },
    "workers": {
        "type": "integer",
        "minimum": 1,
        "maximum": 256,
        "description": "remote sources: objects fetched at once on the instance (default 32)",
    },
}
_DATA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["src", "dst"],
    "properties": DATA_ITEM,
}

RESOURCES: dict[str, Any] = {
    "gpu": {
        "description": (
            'GPU model and count: "A100-80GB:8", "H100", "24GB+", "any", "none"; '
            "omitted: the job needs no GPU"
        ),
        "type": ["string", "integer", "null"],
    },
    "cpus": {**_MIN_COUNT, "description": 'minimum vCPUs, e.g. "16+"'},
    "memory": {**_SIZE, "description": 'minimum RAM, e.g. "128GB+"'},
    "local_nvme": {**_SIZE, "description": 'minimum instance-local NVMe, e.g. "500GB+"'},
    "spot": {"description": "true | false | auto", "enum": [True, False, "auto"]},
    "max_price": {"description": "USD per instance-hour", "type": "number", "exclusiveMinimum": 0},
    "providers": {**_STR_LIST, "description": "restrict to these providers"},
    "regions": {**_STR_LIST, "description": 'region globs, e.g. ["us-*"]'},
    "disk": {**_SIZE, "description": 'boot disk size, e.g. "200GB"'},
    "image": {"type": "string", "description": "provider image id or family"},
    "retry": {
        **_DURATION,
        "description": 'retry the ranked offers this long while none has capacity, e.g. "2h"',
    },
}

LIMITS: dict[str, Any] = {
    "max_runtime": {**_DURATION, "description": 'stop the job after this long, e.g. "6h"'},
    "max_cost": {"type": "number", "exclusiveMinimum": 0, "description": "USD for the job"},
    "idle_timeout": {**_DURATION, "description": "tear down a kept instance idle this long"},
}

TOP: dict[str, Any] = {
    "name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9-]{0,62}$"},
    "resources": {"type": "object", "additionalProperties": False, "properties": RESOURCES},
    "workload": {"type": "object", "description": "sizes and times the job (see `plan`)"},
    "data": {
        "type": "array",
        "items": _DATA,
        "description": "local paths or s3:// gs:// az:// https:// sources, pulled onto /nvme",
    },
    "setup": {"type": "string", "description": "shell run once before `run`"},
    "run": {"type": "string", "description": "the job's command (bash)"},
    "outputs": {"type": "array", "items": _COPY, "description": "instance paths to bring back"},
    "env": {
        "type": "object",
        "additionalProperties": {"type": ["string", "number", "boolean"]},
        "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
    },
    "limits": {"type": "object", "additionalProperties": False, "properties": LIMITS},
    "checkpoint": {"type": "string", "description": "directory kept across preemptions"},
    "num_nodes": {"type": "integer", "enum": [1], "description": "multi-node: not yet"},
}
REQUIRED = ("name", "run")
COPY_KEYS = ("src", "dst")


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a job file."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://cloudgpu.dev/schema/job.json",
        "title": "cloudgpu job",
        "type": "object",
        "additionalProperties": False,
        "required": list(REQUIRED),
        "properties": copy.deepcopy(TOP),
    }
