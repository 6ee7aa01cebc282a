"""A job's reported speed: the stdout line and the $CLOUDGPU_METRICS file read as hostile
input on a real local machine, and recorded in a real SQLite store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cloudgpu.catalog.offer import Offer
from cloudgpu.lifecycle.metrics import (
    MAX_FILE,
    MAX_LINE,
    MetricsTap,
    metrics_path,
    parse_line,
    read_file,
    record_run,
)
from cloudgpu.remote.local import LocalMachine
from cloudgpu.spec.model import JobSpec
from cloudgpu.state import runs
from cloudgpu.state.store import Store

OFFER = Offer(
    provider="sim",
    instance_type="sim.l4",
    region="local",
    zone="",
    market="on_demand",
    gpu="L4",
    gpu_count=1,
    gpu_memory_gb=24,
    vcpus=4,
    memory_gb=16,
    price_per_hour=0.5,
)
JOB = JobSpec(
    name="t", workload={"kind": "lora", "model": "llama-3.2-3b", "tokens": "10M"}, run="x"
)


def _tap(*chunks: bytes) -> tuple[MetricsTap, bytes]:
    seen: list[bytes] = []
    tap = MetricsTap(seen.append)
    for c in chunks:
        tap(c)
    return tap, b"".join(seen)


def test_the_last_reported_line_wins_across_chunk_boundaries() -> None:
    tap, passed = _tap(
        b"step 1\ncloudgpu: tokens_per_s=10",
        b"00.5 layout=ZeRO-3\nnoise\ncloud",
        b"gpu: tokens_per_s=1500 mfu=0.4\r\n",
    )
    assert passed == b"step 1\ncloudgpu: tokens_per_s=1000.5 layout=ZeRO-3\nnoise\n" + (
        b"cloudgpu: tokens_per_s=1500 mfu=0.4\r\n"
    )
    assert tap.tokens_per_s == 1500 and tap.layout == ""
    assert parse_line(b"cloudgpu: a=1 b c=") == {"a": "1", "c": ""}


@pytest.mark.parametrize("value", [b"nan", b"inf", b"-5", b"0", b"1e13", b"abc", b"", b"\xff\xfe"])
def test_implausible_values_are_ignored(value: bytes) -> None:
    tap, _ = _tap(b"cloudgpu: tokens_per_s=42\n", b"cloudgpu: tokens_per_s=" + value + b"\n")
    assert tap.tokens_per_s == 42


def test_an_overlong_line_is_dropped_and_memory_stays_bounded() -> None:
    filler = b"x" * (MAX_LINE + 10)
    tap, _ = _tap(b"cloudgpu: tokens_per_s=7 " + filler, filler, b" more\n")
    assert tap.tokens_per_s is None  # the line it was on never ended within bounds
    tap(b"cloudgpu: tokens_per_s=9\n")
    assert tap.tokens_per_s == 9
    tap(b"y" * (10 * MAX_LINE))
    assert len(tap._partial) <= MAX_LINE


def _machine(tmp_path: Path) -> tuple[LocalMachine, str]:
    m = LocalMachine(tmp_path / "ws")
    return m, metrics_path(m)


def test_metrics_file_regular_json_only(tmp_path: Path) -> None:
    m, path = _machine(tmp_path)
    assert read_file(m, path) == (None, "")  # absent
    Path(path).write_text(json.dumps({"tokens_per_s": 2500.0, "layout": "TP=2"}))
    assert read_file(m, path) == (2500.0, "TP=2")
    for bad in ("[1, 2]", "{not json", json.dumps({"tokens_per_s": "fast"}), "\xff"):
        Path(path).write_text(bad, errors="surrogateescape")
        assert read_file(m, path)[0] is None
    Path(path).write_text('{"tokens_per_s": 5, "pad": "' + "z" * (2 * MAX_FILE) + '"}')
    assert read_file(m, path)[0] is None  # cut at MAX_FILE: no longer valid JSON
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"tokens_per_s": 999}))
    os.unlink(path)
    os.symlink(secret, path)
    assert read_file(m, path) == (None, "")  # a symlink the job planted is not followed


def test_a_successful_run_is_recorded_file_first(tmp_path: Path) -> None:
    m, path = _machine(tmp_path)
    store = Store.open(tmp_path / "state.db")
    tap, _ = _tap(b"cloudgpu: tokens_per_s=1200\n")
    rec = record_run(store, "job-1", JOB, OFFER, tap, m, path, 100.0)
    assert rec is not None and rec.source == "stdout" and rec.tokens_per_s == 1200
    Path(path).write_text(json.dumps({"tokens_per_s": 1300}))
    rec = record_run(store, "job-2", JOB, OFFER, tap, m, path, 200.0)
    assert rec is not None and rec.source == "file" and rec.tokens_per_s == 1300
    got = runs.runs(store)
    assert [(r.job_id, r.tokens_per_s, r.gpu, r.gpu_count) for r in got] == [
        ("job-1", 1200, "L4", 1),
        ("job-2", 1300, "L4", 1),
    ]
    assert got[0].workload == JOB.workload
    # nothing usable, or nothing to attach it to: no row
    assert record_run(store, "job-3", JOB, OFFER, _tap()[0], m, path + "x", 300.0) is None
    bare = JobSpec(name="t", run="x")
    assert record_run(store, "job-4", bare, OFFER, tap, m, path, 400.0) is None
    assert len(runs.runs(store)) == 2
    store.close()
