"""The instance-side pull against the three stores on loopback (moto S3, gcp-storage-
emulator, Azurite), each behind a checking gate: the "instance" is a LocalMachine
workspace whose puller runs as a child process with no credentials in its environment."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.data import pull
from cloudgpu.data.select import Selector
from cloudgpu.data.stores import open_store
from cloudgpu.data.uri import parse
from cloudgpu.errors import AuthError, RemoteError
from cloudgpu.remote import LocalMachine
from tests.data.stores import Dataset, StoreUnderTest, mixed, store

STORES = ["s3", "gcs", "azure"]
pytestmark = pytest.mark.slow  # real emulators, 18 pulls: about a minute


@pytest.fixture(scope="module")
def data() -> Dataset:
    return mixed(small=300, large_mb=20)


@pytest.fixture(scope="module", params=STORES)
def seeded(
    request: pytest.FixtureRequest, data: Dataset, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreUnderTest]:
    with store(request.param, data, tmp_path_factory.mktemp(request.param)) as s:
        yield s


@pytest.fixture
def sut(seeded: StoreUnderTest) -> Iterator[StoreUnderTest]:
    """The module's store with a clean gate (log, clock, faults) for each test."""
    seeded.gate.hits.clear()
    seeded.gate.cut_after.clear()
    seeded.gate.slow.clear()
    seeded.gate.clock = time.time
    yield seeded


def machine(tmp_path: Path) -> LocalMachine:
    return LocalMachine(tmp_path / "instance", base_env={"PATH": os.environ["PATH"]})


def tree_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def do_pull(
    sut: StoreUnderTest, m: LocalMachine, selector: Selector | None = None, **kw: object
) -> pull.PullStats:
    src = parse(sut.uri)
    st = open_store(src, sut.env)
    listing = pull.list_source_with(src, st, selector or Selector())
    return pull.pull(m, listing, st, f"{m.nvme_path}/data", part_size=8 << 20, **kw)  # type: ignore[arg-type]


def test_mixed_dataset_lands_intact_and_the_client_reads_no_object(
    sut: StoreUnderTest, data: Dataset, tmp_path: Path
) -> None:
    m = machine(tmp_path)
    seen: list[tuple[int, int]] = []
    stats = do_pull(sut, m, progress=lambda d, t: seen.append((d, t)))
    assert tree_digests(Path(m.nvme_path, "data")) == data.digests()
    assert (stats.objects, stats.bytes, stats.skipped) == (len(data.files), data.bytes, 0)
    assert seen and seen[-1] == (data.bytes, data.bytes)
    assert sut.client_object_reads() == []
    reads = sut.instance_object_reads()
    assert sum(h.body_bytes for h in reads) == data.bytes
    assert len(reads) >= len(data.files) + 1  # the large object came in ranged parts
    # Nothing left behind: no partial files, no manifest with signed URLs.
    leftovers = [p for p in Path(m.nvme_path).rglob("*") if "cloudgpu-part" in p.name]
    assert leftovers == []
    assert not list(Path(m.nvme_path, ".cloudgpu", "pull").glob("manifest-*"))

    # Incremental: a second pull reads no object at all.
    before = len(sut.instance_object_reads())
    again = do_pull(sut, m)
    assert (again.objects, again.skipped) == (0, len(data.files))
    assert len(sut.instance_object_reads()) == before


def test_excludes_apply_to_the_listing(sut: StoreUnderTest, data: Dataset, tmp_path: Path) -> None:
    m = machine(tmp_path)
    stats = do_pull(sut, m, Selector(["big/", "small/00[12]/"]))
    got = tree_digests(Path(m.nvme_path, "data"))
    want = {k: v for k, v in data.digests().items() if k.startswith("small/000/")}
    assert got == want and stats.objects == len(want)
    assert sut.client_object_reads() == []


def test_changed_local_file_is_fetched_again(
    sut: StoreUnderTest, data: Dataset, tmp_path: Path
) -> None:
    m = machine(tmp_path)
    do_pull(sut, m, Selector(["big/"]))
    victim = Path(m.nvme_path, "data", "small", "000", "s00003.bin")
    victim.write_bytes(b"x" * len(data.files["small/000/s00003.bin"]))  # same size, new bytes
    stats = do_pull(sut, m, Selector(["big/"]))
    assert stats.objects == 1
    assert victim.read_bytes() == data.files["small/000/s00003.bin"]


def test_dropped_connection_is_retried(sut: StoreUnderTest, data: Dataset, tmp_path: Path) -> None:
    m = machine(tmp_path)
    big_path = _object_path(sut, data.large)
    sut.gate.cut_after[big_path] = 1 << 20
    do_pull(sut, m)
    assert tree_digests(Path(m.nvme_path, "data")) == data.digests()


def _object_path(sut: StoreUnderTest, rel: str) -> str:
    src = parse(sut.uri)
    if sut.name == "azure":
        return f"/{src.account}/{src.bucket}/{src.prefix}/{rel}"
    return f"/{src.bucket}/{src.prefix}/{rel}"


def test_expired_url_is_one_clear_error(sut: StoreUnderTest, data: Dataset, tmp_path: Path) -> None:
    m = machine(tmp_path)
    if sut.name == "azure":
        # Azurite checks SAS times against its own clock: sign for 1 s and wait.
        src = parse(sut.uri)
        st = open_store(src, sut.env)
        listing = pull.list_source_with(src, st, Selector(["big/"]))
        signed = time.time()
        urls = st.sign_get(src, listing.objects, 1)
        time.sleep(2.5)
        man = pull.manifest(listing, urls, f"{m.nvme_path}/data", f"{m.nvme_path}/.s", signed + 1)
        man["expires_at"] = time.time() + 30  # the instance's clock lags: the store decides
        rc, last, _ = pull.run_puller(m, man, None, f"{m.nvme_path}/.s")
        assert rc == 11, last
        assert "expired" in last["message"]
        return
    sut.gate.clock = lambda: time.time() + 7 * 24 * 3600
    with pytest.raises(AuthError) as exc:
        do_pull(sut, m, Selector(["big/"]))
    text = str(exc.value)
    assert "signed URL expired" in text and "\n" not in text
    assert "Signature=" not in text and "sig=" not in text


def test_corrupted_object_fails_and_is_not_kept(
    sut: StoreUnderTest, data: Dataset, tmp_path: Path
) -> None:
    """The store's checksum disagrees with the bytes: the puller refuses the file."""
    m = machine(tmp_path)
    src = parse(sut.uri)
    st = open_store(src, sut.env)
    listing = pull.list_source_with(src, st, Selector(["big/"]))
    obj = listing.objects[0]
    if not obj.check:
        pytest.skip(f"{sut.name} keeps no checksum for this object")
    bad = {
        k: ("0" * len(str(v)) if k in ("md5", "s3etag") else "AAAAAA==")
        for k, v in obj.check.items()
        if k != "part_size"
    }
    forged = type(obj)(obj.key, obj.rel, obj.size, obj.id, {**obj.check, **bad}, obj.mtime)
    listing.objects[0] = forged
    with pytest.raises(RemoteError, match="integrity check failed"):
        pull.pull(m, listing, st, f"{m.nvme_path}/data")
    assert not Path(m.nvme_path, "data", obj.rel).exists()


def test_killed_pull_resumes_without_refetching_finished_parts(
    sut: StoreUnderTest, data: Dataset, tmp_path: Path
) -> None:
    m = machine(tmp_path)
    src = parse(sut.uri)
    st = open_store(src, sut.env)
    listing = pull.list_source_with(src, st, Selector(["small/"]))
    big = _object_path(sut, data.large)
    sut.gate.slow[big] = 0.01  # ~6 MB/s per part: time to kill it mid-object
    dest, state = f"{m.nvme_path}/data", f"{m.nvme_path}/.cloudgpu/pull"
    man = pull.manifest(
        listing,
        st.sign_get(src, listing.objects, 600),
        dest,
        state,
        time.time() + 600,
        workers=1,
        part_size=8 << 20,
    )
    Path(state).mkdir(parents=True)
    Path(state, "m.json").write_text(json.dumps(man))
    proc = subprocess.Popen(
        [sys.executable, "-c", pull.PULLER_SOURCE, "pull", f"{state}/m.json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={},
    )
    sidecar = Path(dest, "big", ".large.bin.cloudgpu-part.json")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = json.loads(sidecar.read_text())["md5s"] if sidecar.exists() else {}
        if done:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert done, "the first part never finished"
    assert not Path(dest, data.large).exists()
    sut.gate.slow.clear()
    first = sum(h.body_bytes for h in sut.instance_object_reads())
    stats = pull.pull(m, listing, st, dest, part_size=8 << 20)
    assert stats.resumed_bytes >= 8 << 20
    second = sum(h.body_bytes for h in sut.instance_object_reads()) - first
    assert second == len(data.files[data.large]) - stats.resumed_bytes
    assert (
        hashlib.sha256(Path(dest, data.large).read_bytes()).hexdigest()
        == (data.digests()[data.large])
    )
    assert not sidecar.exists()
