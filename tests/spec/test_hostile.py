"""Job files that used to slip through or crash: each is now one located error (exit 2)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import jsonschema
import pytest
import yaml

from cloudgpu.errors import SpecError
from cloudgpu.spec import json_schema, load_job, parse_job

BASE = "name: x\nrun: y\n"


def error_of(text: str) -> SpecError:
    with pytest.raises(SpecError) as ei:
        parse_job(text, file="job.yaml")
    assert "\n" not in str(ei.value)
    return ei.value


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("limits: {max_cost: .nan}\n", "limits.max_cost"),
        ("limits: {max_cost: .inf}\n", "limits.max_cost"),
        ("resources: {max_price: .nan}\n", "resources.max_price"),
        ("resources: {max_price: -.inf}\n", "resources.max_price"),
        ("resources: {cpus: .nan}\n", "resources.cpus"),
        ("resources: {memory: .inf}\n", "resources.memory"),
        ("resources: {disk: .inf}\n", "resources.disk"),
        ("resources: {disk: 1e400GB}\n", "resources.disk"),
        ("resources: {max_price: " + "9" * 400 + "}\n", "resources.max_price"),
        ("limits: {max_runtime: " + "1" * 400 + "h}\n", "limits.max_runtime"),
        ("limits: {max_runtime: 99999999d}\n", "limits.max_runtime"),
        ("limits: {idle_timeout: 0s}\n", "limits.idle_timeout"),
        ("limits: {max_cost: 1e30}\n", "limits.max_cost"),
        ("resources: {gpu: 'H100:0'}\n", "resources.gpu"),
        ("resources: {gpu: 'H100:100000'}\n", "resources.gpu"),
        ("workload: {kind: train, params: .nan, tokens: 1B}\n", "workload.params"),
        ("workload: {kind: train, params: 8B, tokens: 1B, mfu: .nan}\n", "workload.mfu"),
        ("workload: {kind: train, params: 8B, tokens: 1B, seq_len: 1e99}\n", "workload.seq_len"),
        ("env: {A: .nan}\n", "env.A"),
    ],
)
def test_numbers_are_finite_and_in_range(extra: str, key: str) -> None:
    assert error_of(BASE + extra).key == key


def test_nan_budget_cannot_turn_the_limit_off() -> None:
    e = error_of(BASE + "limits:\n  max_cost: .nan\n")
    assert (e.key, e.line) == ("limits.max_cost", 4) and "finite" in str(e)


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("name: x\nrun: !!python/object/apply:os.system [id]\n", "run", "YAML tag"),
        (BASE + "resources: {gpu: !foo H100}\n", "resources.gpu", "YAML tag '!foo'"),
        (BASE + "env: {A: !!binary aGk=}\n", "env.A", "YAML tag '!!binary'"),
        (BASE + "resources: &r\n  <<: *r\n", "resources", "refers to its own"),
        (BASE + "resources:\n  <<: 3\n", "resources", "merge key"),
        (BASE + "name: z\n", "name", "duplicate"),
        (BASE + "env: {A: 2024-01-01}\n", "env.A", "expected a text"),
        (BASE + 'env: {A: "a\\0b"}\n', "env.A", "NUL"),
        (BASE + 'setup: "a\\0b"\n', "setup", "NUL"),
        (BASE + "data: [{src: '', dst: /nvme/d}]\n", "data[0].src", "got nothing"),
        (BASE + "data: [{src: 's3://', dst: /nvme/d}]\n", "data[0].src", "s3://"),
        (BASE + "data: [{src: 's3://A_B/x', dst: /nvme/d}]\n", "data[0].src", "bucket"),
        (BASE + "data: [{src: 'ftp://b/x', dst: /nvme/d}]\n", "data[0].src", "not supported"),
        (BASE + "data: [{src: 'gs://b/x', dst: /nvme/d}]\n", "data[0].src", "gs://BUCKET"),
        (BASE + "outputs: [{src: /nvme/o, dst: 's3://b/x'}]\n", "outputs[0].dst", "bucket"),
        (BASE + "outputs: [{src: /nvme/o, dst: 'https://h/x'}]\n", "outputs[0].dst", "https://"),
        (BASE + "data: [{src: s3://bucket/x, dst: ''}]\n", "data[0].dst", "/nvme"),
        (BASE + "data: [{src: s3://bucket/x, dst: /etc}]\n", "data[0].dst", "under /nvme"),
        (BASE + "data: [{src: s3://bucket/x, dst: /nvme/../etc}]\n", "data[0].dst", "/nvme"),
        (BASE + "outputs: [{src: /, dst: ./out}]\n", "outputs[0].src", "under /nvme"),
        (BASE + "checkpoint: /root/ckpt\n", "checkpoint", "under /nvme"),
        (BASE + "name2: z\n", "name2", "did you mean 'name'"),
        (BASE + "? [a, b]\n: c\n", None, "plain key"),
    ],
)
def test_yaml_features_and_paths(text: str, key: str | None, words: str) -> None:
    e = error_of(text)
    assert e.key == key and words in str(e), str(e)


def test_merge_keys_merge_and_extension_keys_hold_anchors() -> None:
    job = parse_job(
        BASE + "x-base: &b {gpu: none, spot: true}\nresources:\n  <<: *b\n  spot: false\n"
    )
    assert job.resources.gpu.cpu_only and job.resources.spot == "false"


def test_alias_bomb_costs_nothing() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    e = error_of("\n".join(["x-bomb:", *("  " + ln for ln in lines)]) + "\n" + BASE + "env: *a8\n")
    assert e.key == "env" and "mapping" in str(e)


def test_deep_nesting_names_the_line() -> None:
    e = error_of(BASE + "env: {A: " + "[" * 500 + "]" * 500 + "}\n")
    assert e.line == 3 and "nested" in str(e)


def test_nul_and_non_utf8_bytes(tmp_path: Path) -> None:
    p = tmp_path / "job.yaml"
    p.write_bytes(b"name: x\nrun: y\x00\n")
    with pytest.raises(SpecError, match=r"job.yaml:2: invalid YAML: character #x0000"):
        load_job(p)
    p.write_bytes(b"name: x\nrun: \xff\xfe\n")
    with pytest.raises(SpecError, match=r"job.yaml:2: not UTF-8 text \(byte 0xff\)"):
        load_job(p)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    result: list[BaseException] = []
    t = threading.Thread(target=lambda: _capture(result, fifo), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "load_job blocked on a FIFO"
    assert isinstance(result[0], SpecError) and "not a regular file" in str(result[0])


def _capture(out: list[BaseException], path: Path) -> None:
    try:
        load_job(path)
    except BaseException as exc:  # the test inspects it
        out.append(exc)


def test_huge_values_are_not_echoed_whole() -> None:
    e = error_of(BASE + "resources: {gpu: " + "A" * 1_000_000 + "}\n")
    assert len(str(e)) < 400 and "1,000,000 characters" in str(e)
    e = error_of(BASE + "? " + "B" * 1_000_000 + "\n: 1\n")
    assert len(str(e)) < 600 and "unknown key" in str(e)


def test_directory_and_missing_job_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="a directory"):
        load_job(tmp_path)
    with pytest.raises(SpecError, match="job file not found"):
        load_job(tmp_path / "nope.yaml")


TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@pytest.mark.parametrize("name", ["quickstart", "finetune", "batch-inference"])
def test_templates_satisfy_the_generated_schema(name: str) -> None:
    doc = yaml.safe_load((TEMPLATES / f"{name}.yaml").read_text())
    jsonschema.Draft202012Validator(json_schema()).validate(doc)
    load_job(TEMPLATES / f"{name}.yaml")
