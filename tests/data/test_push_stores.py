"""Outputs uploaded by the instance itself to the three stores on loopback (moto S3,
gcp-storage-emulator, Azurite), each behind the checking gate (signatures, Content-MD5).
The "instance" is a LocalMachine workspace: its pusher runs as a child process with no
credential in its environment; this process only lists, signs and checks."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.data import instance, push
from cloudgpu.data.stores import open_destination
from cloudgpu.data.uri import parse
from cloudgpu.errors import AuthError, RemoteError
from cloudgpu.remote import LocalMachine, MissingSource
from cloudgpu.remote import objwire as wire
from tests.data.stores import (
    Hit,
    StoreUnderTest,
    bucket_uri,
    direct_read,
    direct_write,
    mixed,
    store,
)

STORES = ["s3", "gcs", "azure"]
PART = 8 << 20
GCS_UPLOADS = "/upload/storage/v1/b/training-gs/o"  # where resumable sessions live
pytestmark = pytest.mark.slow  # real emulators


@pytest.fixture(scope="module", params=STORES)
def seeded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreUnderTest]:
    with store(request.param, mixed(small=2, large_mb=0), tmp_path_factory.mktemp("s")) as s:
        yield s


@pytest.fixture
def sut(seeded: StoreUnderTest) -> Iterator[StoreUnderTest]:
    g = seeded.gate
    g.hits.clear(), g.cut_after.clear(), g.slow.clear(), g.hold.clear()
    g.stall_after.clear(), g.puts_seen.clear(), g.released.clear()
    g.clock = time.time
    yield seeded


def outputs(root: Path, small: int = 120, large_mb: int = 20, seed: int = 3) -> dict[str, bytes]:
    rnd = random.Random(seed)
    files = {f"logs/{i:03d}.txt": rnd.randbytes(rnd.randint(0, 3000)) for i in range(small)}
    files["model/weights.bin"] = rnd.randbytes(large_mb << 20)
    files["metrics.json"] = b'{"loss": 0.1}'
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def setup(sut: StoreUnderTest, tmp: Path, prefix: str) -> tuple[LocalMachine, str, str]:
    m = LocalMachine(tmp / "instance", base_env={"PATH": os.environ["PATH"]})
    root = Path(m.nvme_path, "out")
    root.mkdir()
    return m, str(root), bucket_uri(sut, prefix)


def do_push(sut: StoreUnderTest, m: LocalMachine, root: str, dest: str) -> push.PushStats:
    src = parse(dest)
    return push.push(m, root, src, open_destination(src, sut.env), part_size=PART)


def key_of(sut: StoreUnderTest, dest: str, rel: str) -> str:
    return f"{parse(dest).prefix}/{rel}"


def path_of(sut: StoreUnderTest, dest: str, rel: str) -> str:
    src = parse(dest)
    where = f"/{src.account}/{src.bucket}" if sut.name == "azure" else f"/{src.bucket}"
    return f"{where}/{src.prefix}/{rel}"


def uploads(sut: StoreUnderTest, *, client: bool) -> list[Hit]:
    return [
        h
        for h in sut.gate.hits
        if h.method in ("PUT", "POST") and h.from_client == client and h.sent_bytes > 0
    ]


def test_outputs_land_intact_incrementally_and_the_client_sends_no_byte(
    sut: StoreUnderTest, tmp_path: Path
) -> None:
    m, root, dest = setup(sut, tmp_path, "runs/a")
    files = outputs(Path(root))
    os.symlink("/etc/passwd", Path(root, "leak"))  # never followed, never sent
    stats = do_push(sut, m, root, dest)
    assert (stats.objects, stats.skipped) == (len(files), 0)
    assert stats.bytes == sum(map(len, files.values()))
    assert any("leak: a symlink" in n for n in stats.notes)
    # The client made metadata calls only: no object read, no body bigger than a request.
    assert sut.client_object_reads() == []
    assert all(h.sent_bytes < 4096 for h in uploads(sut, client=True))
    assert sum(h.sent_bytes for h in uploads(sut, client=False)) >= stats.bytes
    for rel, data in files.items():
        got = direct_read(sut, key_of(sut, dest, rel))
        assert got is not None and hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    assert direct_read(sut, key_of(sut, dest, "leak")) is None
    assert not list(Path(m.nvme_path, ".cloudgpu", "pull").glob("manifest-*"))

    # Incremental: nothing changed, nothing sent; one file changed, one object sent.
    sut.gate.hits.clear()
    again = do_push(sut, m, root, dest)
    assert (again.objects, again.skipped) == (0, len(files)) and uploads(sut, client=False) == []
    Path(root, "metrics.json").write_bytes(b'{"loss": 0.05}')
    third = do_push(sut, m, root, dest)
    assert (third.objects, third.skipped) == (1, len(files) - 1)
    assert direct_read(sut, key_of(sut, dest, "metrics.json")) == b'{"loss": 0.05}'


def test_killed_upload_never_shows_a_partial_object_and_resumes(
    sut: StoreUnderTest, tmp_path: Path
) -> None:
    """The instance dies between the parts of a large object: a reader still sees the
    old version whole; the next upload sends the rest (S3 and Azure keep the parts that
    arrived, a GCS session is started again) and the new version appears whole."""
    m, root, dest = setup(sut, tmp_path, "runs/kill")
    new = random.Random(5).randbytes(26 << 20)  # 4 parts
    Path(root, "ckpt.bin").write_bytes(new)
    key = key_of(sut, dest, "ckpt.bin")
    direct_write(sut, key, b"old checkpoint")
    src = parse(dest)
    st = open_destination(src, sut.env)
    files, _ = push.scan(m, root, st.max_parts, part_size=PART)
    man = push.manifest(m, root, files, st.sign_put(src, files, 600), time.time() + 600)
    man["workers"] = 1
    held = (
        "/upload/storage/v1/b/training-gs/o"
        if sut.name == "gcs"
        else path_of(sut, dest, "ckpt.bin")
    )
    sut.gate.stall_after[held] = 2  # two parts arrive, the rest wait for the kill
    path = instance.put_manifest(m, man, instance.state_dir(m))
    proc = subprocess.Popen(
        [sys.executable, "-c", push.PUSHER_SOURCE, "push", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_parts_stored(sut)) < 2:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert len(_parts_stored(sut)) >= 2, "no part arrived before the kill"
    assert direct_read(sut, key) == b"old checkpoint"  # never a partial object

    sut.gate.stall_after.clear()
    sut.gate.released.set()
    sut.gate.hits.clear()
    stats = do_push(sut, m, root, dest)
    assert direct_read(sut, key) == new
    resent = sum(h.sent_bytes for h in uploads(sut, client=False))
    if sut.name == "gcs":
        assert stats.resumed_bytes == 0 and resent >= len(new)
    else:
        assert stats.resumed_bytes >= 2 * PART
        assert resent == len(new) - stats.resumed_bytes + _commit_bytes(sut)


def _parts_stored(sut: StoreUnderTest) -> list[Hit]:
    ok = [h for h in sut.gate.hits if h.method == "PUT" and h.status in (200, 201, 308)]
    return [h for h in ok if h.sent_bytes and not h.from_client]


def _commit_bytes(sut: StoreUnderTest) -> int:
    """The completion request's body (its XML list of parts)."""
    done = [
        h
        for h in uploads(sut, client=False)
        if "uploadId" in h.query and "partNumber" not in h.query
    ]
    done += [h for h in uploads(sut, client=False) if h.query.get("comp") == "blocklist"]
    return sum(h.sent_bytes for h in done)


def test_a_file_changed_after_the_scan_is_refused_by_the_store_and_sent_again(
    sut: StoreUnderTest, tmp_path: Path
) -> None:
    m, root, dest = setup(sut, tmp_path, "runs/changed")
    Path(root, "a.txt").write_bytes(b"as scanned")
    src = parse(dest)
    st = open_destination(src, sut.env)
    files, _ = push.scan(m, root, st.max_parts, part_size=PART)
    Path(root, "a.txt").write_bytes(b"rewritten!")  # same size, other bytes
    man = push.manifest(m, root, files, st.sign_put(src, files, 600), time.time() + 600)
    rc, last, _ = push.run_pusher(m, man, None)
    assert rc == 0 and last["changed"] == ["a.txt"], last  # the others would go on
    assert direct_read(sut, key_of(sut, dest, "a.txt")) is None  # never the unscanned bytes
    stats = do_push(sut, m, root, dest)  # a new scan sends what is there now
    assert stats.objects == 1 and direct_read(sut, key_of(sut, dest, "a.txt")) == b"rewritten!"


def test_lost_answers_are_retried(sut: StoreUnderTest, tmp_path: Path) -> None:
    m, root, dest = setup(sut, tmp_path, "runs/lost")
    files = outputs(Path(root), small=3, large_mb=20)
    sut.gate.cut_after[path_of(sut, dest, "metrics.json")] = 0
    if sut.name == "gcs":
        sut.gate.cut_after[GCS_UPLOADS] = 0
    do_push(sut, m, root, dest)
    for rel, data in files.items():
        assert direct_read(sut, key_of(sut, dest, rel)) == data


def test_expired_url_is_one_clear_error(sut: StoreUnderTest, tmp_path: Path) -> None:
    m, root, dest = setup(sut, tmp_path, "runs/late")
    Path(root, "a.txt").write_bytes(b"late")
    if sut.name == "azure":
        # Azurite checks SAS times against its own clock: sign for 1 s and wait.
        src = parse(dest)
        st = open_destination(src, sut.env)
        files, _ = push.scan(m, root, st.max_parts, part_size=PART)
        plans = st.sign_put(src, files, 1)
        time.sleep(2.5)
        man = push.manifest(m, root, files, plans, time.time() + 30)
        rc, last, _ = push.run_pusher(m, man, None)
        assert rc == wire.EXIT_EXPIRED, last
        return
    sut.gate.clock = lambda: time.time() + 7 * 24 * 3600
    with pytest.raises(AuthError) as exc:
        do_push(sut, m, root, dest)
    text = str(exc.value)
    assert "signed URL expired" in text and "\n" not in text
    assert "Signature=" not in text and "sig=" not in text


def test_missing_output_directory_is_reported_not_uploaded(
    sut: StoreUnderTest, tmp_path: Path
) -> None:
    m = LocalMachine(tmp_path / "instance", base_env={"PATH": os.environ["PATH"]})
    with pytest.raises(MissingSource):
        do_push(sut, m, f"{m.nvme_path}/never-written", bucket_uri(sut, "runs/none"))


def test_hostile_scan_lines_are_refused() -> None:
    good = ["a/b.txt", 3, 1.0, "0" * 32, PART, []]
    assert push.parse_file(good, PART, 10_000) is not None
    for bad in (
        ["../etc/passwd", *good[1:]],
        ["/abs", *good[1:]],
        [good[0], -1, *good[2:]],
        [good[0], 3, float("nan"), *good[3:]],
        [good[0], 3, 1.0, "xyz", PART, []],
        [good[0], 3, 1.0, "0" * 32, 1, []],  # a part size we did not ask for
        [good[0], PART * 2, 1.0, "0" * 32, PART, ["0" * 32]],  # parts missing
        json.loads('["a", 1, 1, "' + "0" * 32 + '", 8388608, [1]]'),
    ):
        assert push.parse_file(bad, PART, 10_000) is None, bad


def test_upload_errors_name_no_secret(sut: StoreUnderTest, tmp_path: Path) -> None:
    m, root, dest = setup(sut, tmp_path, "runs/secret")
    Path(root, "a.txt").write_bytes(b"x")
    sut.gate.clock = lambda: time.time() + 7 * 24 * 3600
    try:
        do_push(sut, m, root, dest)
    except (AuthError, RemoteError) as exc:
        for secret in sut.secrets:
            assert secret not in str(exc) and secret not in (exc.hint or "")
