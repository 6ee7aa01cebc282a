"""The rows of the state store as values: jobs, instances and spend.

Frozen dataclasses whose field names are the tables' column names, except the JSON
columns (``spec_json`` -> ``spec``...), so one pair of functions converts both ways and
no column list is written twice. Nothing here opens the store.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobRecord:
    id: str
    name: str
    state: str
    spec: dict[str, Any] = field(default_factory=dict)
    spec_path: str = ""
    provider: str = ""
    instance_type: str = ""
    exit_code: int | None = None
    error: str = ""
    pid: int | None = None
    log_path: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    host: str = ""  # where ``pid`` runs


@dataclass(frozen=True)
class InstanceRecord:
    id: str
    job_id: str
    provider: str
    state: str
    provider_id: str = ""
    instance_type: str = ""
    region: str = ""
    zone: str = ""
    market: str = "on_demand"
    gpu: str = ""
    gpu_count: int = 0
    price_per_hour: float = 0.0
    idempotency_token: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    ssh: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    launched_at: float | None = None
    terminated_at: float | None = None


@dataclass(frozen=True)
class SpendRecord:
    instance_id: str
    job_id: str
    provider: str
    instance_type: str
    region: str
    market: str
    gpu: str
    gpu_count: int
    price_per_hour: float
    started_at: float
    ended_at: float
    billed_seconds: float
    cost: float


# Columns holding JSON, and the field each one becomes.
_JSON_COLS = {"spec_json": "spec", "tags_json": "tags", "ssh_json": "ssh"}
_JSON_FIELDS = {v: k for k, v in _JSON_COLS.items()}


def row_to(cls: type, row: sqlite3.Row) -> Any:
    """The record ``cls`` of one row of its table."""
    data = {}
    for k in row.keys():  # noqa: SIM118 - sqlite3.Row is not a Mapping
        if k in _JSON_COLS:
            data[_JSON_COLS[k]] = json.loads(row[k])
        else:
            data[k] = row[k]
    return cls(**data)


def columns(rec: Any) -> dict[str, Any]:
    """The column values of the record ``rec``, as its table holds them."""
    out = {}
    for f in dataclasses.fields(rec):
        value = getattr(rec, f.name)
        if f.name in _JSON_FIELDS:
            out[_JSON_FIELDS[f.name]] = json.dumps(dict(value))
        else:
            out[f.name] = value
    return out
