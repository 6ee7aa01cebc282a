"""The plan counts staging time for object-store data: the size comes from the source's
listing (metadata only), after its excludes, through the one plan path launch uses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data.stores import StoreUnderTest, mixed, s3_store
from tests.lifecycle.helpers import job_file, main_exit
from tests.lifecycle.test_sim_e2e import configure, offer

pytestmark = pytest.mark.slow  # moto


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[StoreUnderTest]:
    with s3_store(mixed(small=50, large_mb=8)) as s:
        for k, v in s.env.items():
            monkeypatch.setenv(k, v)
        yield s


def staging(tmp_path: Path, data: str) -> tuple[float, str]:
    body = (
        "name: sized\nresources: {providers: [sim]}\n"
        "workload: {kind: lora, params: 1B, tokens: 10M}\n"  # staging is part of an estimate
        f"{data}run: 'true'\n"
    )
    code, out, err = main_exit(["plan", str(job_file(tmp_path, body)), "--json"])
    assert code == 0, err
    return float(json.loads(out)[0]["staging_hours"]), err


def test_listed_size_gives_the_staging_time(
    s3: StoreUnderTest, cloudgpu_home: Path, tmp_path: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.l4", 1.0)])
    none, _ = staging(tmp_path, "")
    full, _ = staging(tmp_path, f"data: [{{src: {s3.uri}, dst: /nvme/d}}]\n")
    small, _ = staging(tmp_path, f"data: [{{src: {s3.uri}, dst: /nvme/d, exclude: [big/]}}]\n")
    assert none == 0.0 and 0.0 < small < full, (none, small, full)
    assert full / small == pytest.approx(s3_bytes(s3) / s3_bytes(s3, "small/"), rel=0.01)
    assert s3.client_object_reads() == []  # listed, never read


def test_unlistable_source_says_why_and_still_plans(
    s3: StoreUnderTest, cloudgpu_home: Path, tmp_path: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.l4", 1.0)])
    hours, err = staging(tmp_path, "data: [{src: s3://no-such-bucket/x, dst: /nvme/d}]\n")
    assert hours == 0.0
    assert "s3://no-such-bucket/x: size not known" in err


def s3_bytes(s3: StoreUnderTest, under: str = "") -> int:
    c = s3.extra["client"]
    pages = c.get_paginator("list_objects_v2").paginate(Bucket="training", Prefix="sets/v1/")
    return sum(
        o["Size"]
        for p in pages
        for o in p.get("Contents", [])
        if o["Key"].startswith("sets/v1/" + under)
    )
