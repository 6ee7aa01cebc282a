"""The state store's tables and how an older store is brought up to date.

Version N of the schema is the first script plus the first N-1 migrations; each step
runs inside one write transaction with the version it reaches (cloudgpu.state.store
loops over them under its lock). Tables added later by a module of their own (runs,
probes) are created on first use and need no step here.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 2

SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    spec_json TEXT NOT NULL DEFAULT '{}',
    spec_path TEXT NOT NULL DEFAULT '',
    provider TEXT NOT NULL DEFAULT '',
    instance_type TEXT NOT NULL DEFAULT '',
    exit_code INTEGER,
    error TEXT NOT NULL DEFAULT '',
    pid INTEGER,
    log_path TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    provider_id TEXT NOT NULL DEFAULT '',
    instance_type TEXT NOT NULL DEFAULT '',
    region TEXT NOT NULL DEFAULT '',
    zone TEXT NOT NULL DEFAULT '',
    market TEXT NOT NULL DEFAULT 'on_demand',
    gpu TEXT NOT NULL DEFAULT '',
    gpu_count INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    price_per_hour REAL NOT NULL DEFAULT 0,
    idempotency_token TEXT NOT NULL DEFAULT '',
    tags_json TEXT NOT NULL DEFAULT '{}',
    ssh_json TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    launched_at REAL,
    terminated_at REAL
);
CREATE INDEX IF NOT EXISTS instances_job ON instances(job_id);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    instance_id TEXT NOT NULL DEFAULT '',
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS spend (
    instance_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    region TEXT NOT NULL DEFAULT '',
    market TEXT NOT NULL DEFAULT 'on_demand',
    gpu TEXT NOT NULL DEFAULT '',
    gpu_count INTEGER NOT NULL DEFAULT 0,
    price_per_hour REAL NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    billed_seconds REAL NOT NULL,
    cost REAL NOT NULL
);
"""

# Migrations from version N to N+1, applied in order inside one transaction each.
MIGRATIONS: dict[int, str] = {
    # The host a job's lifecycle process runs on: its pid means something only there.
    1: "ALTER TABLE jobs ADD COLUMN host TEXT NOT NULL DEFAULT ''",
}


def schema_version(conn: sqlite3.Connection) -> int:
    """The version of the store on ``conn``; 0 for a new, empty file."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0]) if row else 0


def step(c: sqlite3.Connection, version: int) -> None:
    """Bring a store of ``version`` to ``version + 1``, inside the caller's transaction."""
    script = SCHEMA_V1 if version == 0 else MIGRATIONS[version]
    for stmt in script.split(";"):
        if stmt.strip():
            c.execute(stmt)
    c.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)",
        (str(version + 1),),
    )
