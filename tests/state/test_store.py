"""The SQLite state store: schema versioning, records round-trip, crash consistency."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloudgpu.errors import StateError
from cloudgpu.state.store import SCHEMA_VERSION, InstanceRecord, SpendRecord, Store

WRITER = """
import sys, uuid
from pathlib import Path
from cloudgpu.state.store import InstanceRecord, Store
s = Store.open(Path(sys.argv[1]))
i = 0
while True:
    jid = f"job-{i}"
    s.add_job(jid, "crash", {"i": i, "pad": "x" * 2000})
    s.add_instance(InstanceRecord(id=f"inst-{i}", job_id=jid, provider="sim", state="running",
                                  tags={"cloudgpu-job": jid}))
    s.add_event(jid, "written", str(i))
    if i == 50:
        print("ready", flush=True)
    i += 1
"""


def test_round_trip_and_schema_version(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.db")
    assert store.schema_version() == SCHEMA_VERSION
    store.add_job("j1", "demo", {"run": "echo"})
    store.add_instance(
        InstanceRecord(
            id="i1", job_id="j1", provider="sim", state="requested", tags={"cloudgpu-job": "j1"}
        )
    )
    store.update_instance("i1", state="running", provider_id="sim-1", ssh={"host": "127.0.0.1"})
    store.record_spend(
        SpendRecord(
            "i1",
            "j1",
            "sim",
            "g5.xlarge",
            "us",
            "on_demand",
            "A10G",
            1,
            1.0,
            0.0,
            3600.0,
            3600.0,
            1.0,
        )
    )
    assert store.instance("i1").ssh == {"host": "127.0.0.1"}
    assert store.find_job("j1").spec == {"run": "echo"}
    assert [r.cost for r in store.spend(job_id="j1")] == [1.0]
    with pytest.raises(StateError, match="no job"):
        store.find_job("nope")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StateError, match="newer"):
        Store.open(path)


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError, match="unreadable"):
        Store.open(path)


@pytest.mark.slow
def test_kill_9_mid_write_leaves_a_consistent_store(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # the writer is in the middle of some transaction now
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = Store.open(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    jobs = store.jobs()
    assert len(jobs) > 50
    for job in jobs:  # every committed row is whole
        assert job.spec["pad"] == "x" * 2000
    # each write is all-or-nothing: an instance exists only for a committed job
    instance_jobs = {r.job_id for r in store.instances()}
    assert instance_jobs <= {j.id for j in jobs}
    store.add_job("after-crash", "ok", {})  # and the store keeps working
