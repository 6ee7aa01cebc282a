"""SQLite (WAL) store of jobs, instances, events and spend, with schema versioning.

One file in the data dir. Every write is one transaction, so a crash mid-write leaves
the store as it was before that write. Instances are recorded *before* the provider's
create call (state ``requested``) so a crash during create leaves something findable.
Nothing secret is ever stored here: SSH targets hold key *paths*, never keys.

The store is passed in to whoever needs it; there is no module-level connection. Its
rows are the records of cloudgpu.state.records; its tables and their migrations are
cloudgpu.state.schema.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cloudgpu.errors import CloudGPUError, StateError, StoreBusy
from cloudgpu.state import schema
from cloudgpu.state.records import InstanceRecord, JobRecord, SpendRecord, columns, row_to
from cloudgpu.state.schema import SCHEMA_VERSION

LOCK_WAIT_S = 30.0  # how long a write waits for another process's write lock
# The columns a caller may change after the row is made.
_JOB_FIELDS = frozenset(
    {"name", "state", "provider", "instance_type", "exit_code", "error", "pid", "log_path", "host"}
)
_INSTANCE_FIELDS = frozenset(
    {"provider_id", "state", "launched_at", "terminated_at", "ssh", "zone", "price_per_hour"}
)


def _only(fields: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    bad = set(fields) - allowed
    if bad:
        raise CloudGPUError(f"bug: cannot update {what} fields {sorted(bad)}")


def _create_private(path: Path) -> None:
    """Create the store file owner-only (0600) before SQLite does (it would use the
    umask); its -wal and -shm files take the same mode."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError:
        pass  # read-only or full: Store.open falls back, or reports it


def _why_read_only(path: Path, exc: sqlite3.OperationalError) -> str:
    try:
        if os.statvfs(path.parent).f_bavail == 0:
            return "no space left on its disk"
    except OSError:
        pass
    return "its disk is read-only" if not os.access(path.parent, os.W_OK) else str(exc)


def _read_only(path: Path, clock: Any, why: str) -> Store | None:
    """The store opened for reading only (immutable when even its -shm cannot be made)."""
    if not path.is_file():
        return None
    for query in ("mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"file:{path}?{query}", uri=True, isolation_level=None)
            conn.row_factory = sqlite3.Row
            store = Store(conn, path, clock, read_only=why)
            if store.schema_version() == SCHEMA_VERSION:
                return store
            conn.close()
        except sqlite3.DatabaseError:
            continue
    return None


class Store:
    """A connection to one state file. Use :meth:`open`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        clock: Any = time.time,
        lock_wait_s: float = LOCK_WAIT_S,
        *,
        read_only: str | None = None,
    ) -> None:
        self._conn = conn
        self.path = path
        self.clock = clock
        self.lock_wait_s = lock_wait_s
        self.read_only = read_only  # why it was opened for reading only

    @classmethod
    def open(cls, path: Path, clock: Any = time.time, lock_wait_s: float = LOCK_WAIT_S) -> Store:
        """``lock_wait_s``: how long a write waits while another process holds the write
        lock (a lifecycle with an instance up waits long rather than fail). When its disk
        is read-only or full, an existing store is opened read-only instead, so `status`,
        `logs` and reports still work; a write then fails saying why."""
        path.parent.mkdir(parents=True, exist_ok=True)
        _create_private(path)
        try:
            busy_ms = int(min(lock_wait_s, LOCK_WAIT_S) * 1000)
            conn = sqlite3.connect(str(path), timeout=busy_ms / 1000, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={busy_ms}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            store = cls(conn, path, clock, lock_wait_s)
            store._migrate()
        except sqlite3.OperationalError as exc:
            fallback = _read_only(path, clock, _why_read_only(path, exc))
            if fallback is None:
                raise
            return fallback
        except sqlite3.DatabaseError as exc:
            raise StateError(
                f"{path}: state store unreadable: {exc}",
                hint="move the file away to start a fresh store (running jobs will be lost)",
            ) from exc
        return store

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: all of it lands, or none."""
        if self.read_only:
            raise StateError(
                f"{self.path}: cannot write the state store: {self.read_only}",
                hint="free space or make CLOUDGPU_HOME writable (read-only commands still work)",
            )
        self._begin()
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    def _begin(self) -> None:
        """BEGIN IMMEDIATE, waiting up to ``lock_wait_s`` for another writer; then a
        one-line StoreBusy, never a raw "database is locked"."""
        start = time.monotonic()
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise StateError(f"{self.path}: state store error: {exc}") from exc
                waited = time.monotonic() - start
                if waited >= self.lock_wait_s:
                    raise StoreBusy(
                        f"{self.path}: the state store is locked by another process "
                        f"(waited {waited:.0f} s)",
                        hint="another cloudgpu command is writing to it; retry when it is done",
                    ) from exc

    def owner_id(self) -> str:
        """This store's own random id, made once: the owner tag of everything launched
        from it, so a sweep from another CLOUDGPU_HOME (same user and host, or not)
        never sees, let alone removes, what this one launched."""
        row = self._conn.execute("SELECT value FROM meta WHERE key='owner_id'").fetchone()
        if row:
            return str(row[0])
        with self.tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES('owner_id', ?)",
                ("cg-" + secrets.token_hex(8),),
            )
            row = c.execute("SELECT value FROM meta WHERE key='owner_id'").fetchone()
        return str(row[0])

    def _migrate(self) -> None:
        """Create or upgrade the schema. Each step re-reads the version inside its own
        write transaction: processes opening one store at once never apply a step twice."""
        if self.schema_version() == SCHEMA_VERSION:
            return
        while True:
            with self.tx() as c:
                version = self.schema_version()
                if version > SCHEMA_VERSION:
                    raise StateError(
                        f"{self.path}: state schema v{version} is newer than this cloudgpu "
                        f"(v{SCHEMA_VERSION})",
                        hint="upgrade cloudgpu",
                    )
                if version == SCHEMA_VERSION:
                    return
                schema.step(c, version)

    def schema_version(self) -> int:
        return schema.schema_version(self._conn)

    def _insert(self, verb: str, table: str, row: Mapping[str, Any]) -> None:
        """One row, its column names taken from the record (never from input)."""
        marks = ",".join("?" * len(row))
        with self.tx() as c:
            c.execute(f"{verb} INTO {table}({', '.join(row)}) VALUES({marks})", tuple(row.values()))

    def _update(self, table: str, row_id: str, fields: Mapping[str, Any]) -> None:
        """Set ``fields`` (checked names: never from input) of the row ``row_id``."""
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.tx() as c:
            c.execute(f"UPDATE {table} SET {cols} WHERE id=?", (*fields.values(), row_id))

    def _select(
        self, table: str, where: list[tuple[str, tuple[Any, ...]]], order: str
    ) -> list[sqlite3.Row]:
        """Every row of ``table`` meeting all of ``where`` (condition, its arguments)."""
        sql = f"SELECT * FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(cond for cond, _ in where)
        args = [a for _, values in where for a in values]
        return self._conn.execute(f"{sql} ORDER BY {order}", args).fetchall()

    # -- jobs ------------------------------------------------------------------------

    def add_job(
        self,
        job_id: str,
        name: str,
        spec: Mapping[str, Any],
        spec_path: str = "",
        log_path: str = "",
        state: str = "pending",
    ) -> JobRecord:
        now = self.clock()
        with self.tx() as c:
            c.execute(
                "INSERT INTO jobs(id, name, state, spec_json, spec_path, log_path, created_at,"
                " updated_at) VALUES(?,?,?,?,?,?,?,?)",
                (job_id, name, state, json.dumps(spec), spec_path, log_path, now, now),
            )
        return self.job(job_id)

    def update_job(self, job_id: str, **fields: Any) -> None:
        _only(fields, _JOB_FIELDS, "job")
        self._update("jobs", job_id, {**fields, "updated_at": self.clock()})

    def job(self, job_id: str) -> JobRecord:
        row = self._conn.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise StateError(f"no job '{job_id}'", hint="`cloudgpu status` lists jobs")
        return row_to(JobRecord, row)

    def find_job(self, ref: str) -> JobRecord:
        """A job by id, unique id prefix, or name (the newest with that name)."""
        rows = self._conn.execute(
            "SELECT * FROM jobs WHERE id=? OR id LIKE ? OR name=? ORDER BY created_at DESC",
            (ref, ref.replace("%", "") + "%", ref),
        ).fetchall()
        exact = [r for r in rows if r["id"] == ref]
        if exact:
            return row_to(JobRecord, exact[0])
        by_prefix = [r for r in rows if r["id"].startswith(ref)]
        if len(by_prefix) == 1:
            return row_to(JobRecord, by_prefix[0])
        by_name = [r for r in rows if r["name"] == ref]
        if by_name:
            return row_to(JobRecord, by_name[0])
        if len(by_prefix) > 1:
            raise StateError(f"job id prefix '{ref}' is ambiguous", hint="give more characters")
        raise StateError(f"no job '{ref}'", hint="`cloudgpu status` lists jobs")

    def jobs(self, states: tuple[str, ...] | None = None) -> list[JobRecord]:
        where = [(f"state IN ({','.join('?' * len(states))})", states)] if states else []
        return [row_to(JobRecord, r) for r in self._select("jobs", where, "created_at")]

    # -- instances -------------------------------------------------------------------

    def add_instance(self, rec: InstanceRecord) -> None:
        self._insert(
            "INSERT", "instances", columns(rec) | {"created_at": rec.created_at or self.clock()}
        )

    def update_instance(self, instance_id: str, **fields: Any) -> None:
        _only(fields, _INSTANCE_FIELDS, "instance")
        if "ssh" in fields:
            fields["ssh_json"] = json.dumps(fields.pop("ssh"))
        self._update("instances", instance_id, fields)

    def instance(self, instance_id: str) -> InstanceRecord:
        row = self._conn.execute("SELECT * FROM instances WHERE id=?", (instance_id,)).fetchone()
        if row is None:
            raise StateError(f"no instance '{instance_id}'")
        return row_to(InstanceRecord, row)

    def instances(self, job_id: str | None = None, live_only: bool = False) -> list[InstanceRecord]:
        where: list[tuple[str, tuple[Any, ...]]] = []
        if job_id is not None:
            where.append(("job_id=?", (job_id,)))
        if live_only:
            # purged: no longer tracked (`down --purge`); it may still bill, but nothing
            # here can reach it, so no command should try again.
            where.append(("state NOT IN ('terminated', 'preempted', 'purged')", ()))
        return [row_to(InstanceRecord, r) for r in self._select("instances", where, "created_at")]

    # -- events ----------------------------------------------------------------------

    def add_event(self, job_id: str, kind: str, message: str = "", instance_id: str = "") -> None:
        with self.tx() as c:
            c.execute(
                "INSERT INTO events(job_id, instance_id, ts, kind, message) VALUES(?,?,?,?,?)",
                (job_id, instance_id, self.clock(), kind, message),
            )

    def events(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT * FROM events WHERE job_id=? ORDER BY seq", (job_id,)
        ).fetchall()
        return [dict(r) for r in rows]

    # -- spend -----------------------------------------------------------------------

    def record_spend(self, rec: SpendRecord) -> None:
        """Record (or correct) what one instance cost; keyed by instance id."""
        self._insert("INSERT OR REPLACE", "spend", columns(rec))

    def spend(self, since: float | None = None, job_id: str | None = None) -> list[SpendRecord]:
        where: list[tuple[str, tuple[Any, ...]]] = []
        if since is not None:
            where.append(("ended_at >= ?", (since,)))
        if job_id is not None:
            where.append(("job_id = ?", (job_id,)))
        return [row_to(SpendRecord, r) for r in self._select("spend", where, "started_at")]
