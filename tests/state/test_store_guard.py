"""The store under contention and across homes: owner id, migration, a held write lock."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from cloudgpu.errors import EXIT_BUSY, StoreBusy
from cloudgpu.state.store import SCHEMA_VERSION, Store


def test_owner_id_is_made_once_per_home_and_differs_between_homes(tmp_path: Path) -> None:
    a = Store.open(tmp_path / "a" / "state.db")
    first = a.owner_id()
    assert first.startswith("cg-") and len(first) == 19
    assert a.owner_id() == first
    assert Store.open(tmp_path / "a" / "state.db").owner_id() == first  # kept in the store
    assert Store.open(tmp_path / "b" / "state.db").owner_id() != first


def test_a_v1_store_is_migrated_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path).add_job("old-1", "old", {})
    with sqlite3.connect(path) as c:  # as a v1 store was: no host column
        c.execute("ALTER TABLE jobs DROP COLUMN host")
        c.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    s = Store.open(path)
    assert s.schema_version() == SCHEMA_VERSION
    assert s.job("old-1").host == ""
    s.update_job("old-1", host="somewhere")
    assert s.job("old-1").host == "somewhere"


def test_many_processes_opening_a_fresh_store_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            Store.open(path).owner_id()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({Store.open(path).owner_id() for _ in range(3)}) == 1


def test_a_held_write_lock_is_one_clear_error_after_the_wait(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path).add_job("j", "j", {})
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing and not letting go
    s = Store.open(path, lock_wait_s=0.5)
    assert s.job("j").state == "pending"  # reads still work (WAL)
    t0 = time.monotonic()
    with pytest.raises(StoreBusy) as err:
        s.update_job("j", state="running")
    assert 0.4 < time.monotonic() - t0 < 5
    assert "locked by another process" in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == EXIT_BUSY
    holder.execute("ROLLBACK")
    s.update_job("j", state="running")  # the lock let go: the write lands
    assert s.job("j").state == "running"


def test_a_patient_store_waits_out_a_short_lock(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path).add_job("j", "j", {})
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(1.0, lambda: holder.execute("COMMIT")).start()
    s = Store.open(path, lock_wait_s=20)
    s.update_job("j", state="running")  # waited, then wrote
    assert s.job("j").state == "running"
