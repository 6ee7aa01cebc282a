"""End to end on the sim cloud: one job whose data comes from S3, GCS and Azure at once
(one large object and a thousand small ones each), pulled by the instance itself, and
whose outputs go back to all three, uploaded by the instance itself.

Checked: every byte lands intact on the instance's /nvme; the client process read no
object (the gates' logs); no credential of the client (S3 secret key, Azure account key,
the GCS service-account private key) is on the instance, in its environment, in the
job's log or in the state store; signed URLs do not appear in the log either.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.data.stores import Dataset, StoreUnderTest, bucket_uri, direct_read, mixed, store
from tests.lifecycle.helpers import job_file, main_exit
from tests.lifecycle.test_sim_e2e import configure, live_sim, offer

pytestmark = pytest.mark.slow


@pytest.fixture
def stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Dataset, dict[str, StoreUnderTest]]]:
    data = mixed(small=1000, large_mb=20, seed=11)
    with ExitStack() as stack:
        got = {}
        for name in ("s3", "gcs", "azure"):
            (tmp_path / name).mkdir()
            got[name] = stack.enter_context(store(name, data, tmp_path / name))
            for k, v in got[name].env.items():
                monkeypatch.setenv(k, v)
        yield data, got


def test_job_pulls_from_every_store_onto_the_instance(
    stores: tuple[Dataset, dict[str, StoreUnderTest]], cloudgpu_home: Path, tmp_path: Path
) -> None:
    data, sut = stores
    configure(cloudgpu_home, [offer("sim.l4", 1.0)])
    job = job_file(
        tmp_path,
        f"""
name: pulls
resources: {{providers: [sim]}}  # the S3 credentials would enable aws (against moto)
data:
  - {{src: {sut["s3"].uri}, dst: /nvme/s3}}
  - {{src: {sut["gcs"].uri}, dst: /nvme/gs}}
  - {{src: {sut["azure"].uri}, dst: /nvme/az, workers: 16}}
outputs:
  - {{src: /nvme/out, dst: {bucket_uri(sut["s3"], "results/pulls")}}}
  - {{src: /nvme/out, dst: {bucket_uri(sut["gcs"], "results/pulls")}}}
  - {{src: /nvme/out, dst: {bucket_uri(sut["azure"], "results/pulls")}}}
run: |
  cd $CLOUDGPU_NVME
  mkdir -p out/deep && echo trained > out/model.txt
  head -c 9000000 s3/big/large.bin > out/deep/w.bin
  for d in s3 gs az; do
    (cd $d && find . -type f | LC_ALL=C sort | xargs sha256sum | sed "s|^|$d |")
  done
  echo "== state"; ls -a .cloudgpu/pull; cat .cloudgpu/pull/* ; echo
  echo "== env"; env
""",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    want = data.digests()
    got: dict[str, dict[str, str]] = {"s3": {}, "gs": {}, "az": {}}
    for line in out.split("== state")[0].splitlines():
        if line[:3] not in ("s3 ", "gs ", "az "):
            continue  # the plan printed before the job's output
        where, digest, rel = line.split()
        got[where][rel.removeprefix("./")] = digest
    assert got == {"s3": want, "gs": want, "az": want}
    for s in sut.values():
        assert s.client_object_reads() == [], s.name
        assert sum(h.body_bytes for h in s.instance_object_reads()) == data.bytes, s.name
        client_bodies = [h.sent_bytes for h in s.gate.hits if h.from_client]
        assert max(client_bodies, default=0) < 4096, s.name  # the instance uploaded them
        prefix = bucket_uri(s, "results/pulls").split("/", 3)[-1]
        if s.name == "azure":
            prefix = prefix.split("/", 1)[1]
        assert direct_read(s, f"{prefix}/model.txt") == b"trained\n", s.name
        big = direct_read(s, f"{prefix}/deep/w.bin")
        assert big == data.files[data.large][:9000000], s.name
    assert err.count("2 object(s) uploaded by the instance") == 3
    assert "manifest-" not in out.split("== state")[1].split("== env")[0]
    assert "3 object(s)" not in err and "1001 object(s) pulled" in err and "objects/s" in err

    secrets = [x for s in sut.values() for x in s.secrets]
    log = next((cloudgpu_home / "data" / "logs").glob("pulls-*.log")).read_text()
    db = (cloudgpu_home / "data" / "state.db").read_bytes()
    for secret in secrets:
        assert secret not in out, "a credential reached the instance"
        assert secret not in log and secret.encode() not in db
    for signature in ("X-Amz-Signature=", "X-Goog-Signature=", "&sig="):
        assert signature not in log + err
        assert signature.encode() not in db
    assert live_sim(cloudgpu_home) == []
    assert "data probe: NVMe" in err


@pytest.fixture
def s3_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Dataset, dict[str, StoreUnderTest]]]:
    """The same dataset in S3 alone (seeding all three stores takes half a minute)."""
    data = mixed(small=1000, large_mb=20, seed=11)
    with store("s3", data, tmp_path) as s3:
        for k, v in s3.env.items():
            monkeypatch.setenv(k, v)
        yield data, {"s3": s3}


def test_listing_size_and_names_are_reported(
    s3_only: tuple[Dataset, dict[str, StoreUnderTest]], cloudgpu_home: Path, tmp_path: Path
) -> None:
    """`cloudgpu data ls` lists through the client's credentials and reads no object."""
    data, sut = s3_only
    code, out, err = main_exit(["data", "ls", sut["s3"].uri, "--exclude", "big/", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert got["objects"] == len(data.files) - 1
    assert got["bytes"] == data.bytes - len(data.files[data.large])
    assert sut["s3"].client_object_reads() == []
