"""The Kaggle provider against a loopback Kaggle API that really runs the pushed kernel.

The contract suite, then `cloudgpu launch` end to end: local data uploaded as a private
dataset, the job's commands run by the kernel, its log and outputs brought back, and
everything deleted at teardown; the weekly quota used up, the session limit hit, a job
failing, a lost SaveKernel answer (one kernel, never two), a body the SDK's types do not
accept, legacy kaggle.json credentials, and hostile output file names.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloudgpu_providers.kaggle import KaggleProvider
from cloudgpu_providers.kaggle.runner import OUTPUTS

from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.errors import ProviderError
from cloudgpu.paths import Paths
from cloudgpu.provider import InstanceState, ProviderContext
from cloudgpu.testing import ProviderContract
from tests.fixtures.kaggle.server import KEY, TOKEN, USER, FakeKaggle
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, store, wait_for
from tests.providers.lifecycle_kit import write_config

pytest.importorskip("kagglesdk")


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKaggle]:
    server = FakeKaggle(tmp_path / "kaggle-side")
    with server:
        yield server


def _ctx(fake: FakeKaggle, paths: Paths, home: Path, **env: str) -> ProviderContext:
    env = env or {"KAGGLE_API_TOKEN": TOKEN, "KAGGLE_USERNAME": USER}
    return ProviderContext(
        config={"api_url": fake.base_url, "backoff_s": 0},
        paths=paths,
        env={"HOME": str(home), **env},
        sleep=lambda s: None,
    )


@pytest.fixture
def provider(fake: FakeKaggle, paths: Paths, tmp_path: Path) -> KaggleProvider:
    return KaggleProvider(_ctx(fake, paths, tmp_path))


@pytest.fixture
def offer(provider: KaggleProvider) -> Offer:
    return next(o for o in provider.offers() if o.instance_type == "NvidiaTeslaT4")


class TestKaggleContract(ProviderContract):
    provider_name = "kaggle"
    ready_timeout = 30.0


def test_free_tier_offers_carry_their_limits(provider: KaggleProvider) -> None:
    rows = {o.instance_type: o for o in provider.offers()}
    t4, p100 = rows["NvidiaTeslaT4"], rows["NvidiaTeslaP100"]
    assert (t4.gpu, t4.gpu_count, p100.gpu, p100.gpu_count) == ("T4", 2, "P100", 1)
    for o in rows.values():
        assert o.price_per_hour == 0 and FLAG_FREE_TIER in o.flags
        assert o.extra["session_hours"] == 12 and o.extra["weekly_quota_hours"] == 30


def test_check_reports_the_weekly_quota(provider: KaggleProvider, fake: FakeKaggle) -> None:
    fake.gpu_used_s = 4.5 * 3600
    av = provider.check()
    assert av.enabled and "GPU quota 4.5 of 30.0 h used" in av.reason
    assert TOKEN not in av.reason


def test_legacy_kaggle_json_is_found_and_accepted(
    fake: FakeKaggle, paths: Paths, tmp_path: Path
) -> None:
    (tmp_path / ".kaggle").mkdir()
    (tmp_path / ".kaggle" / "kaggle.json").write_text(json.dumps({"username": USER, "key": KEY}))
    provider = KaggleProvider(_ctx(fake, paths, tmp_path, NOTHING="1"))
    av = provider.availability()
    assert av.enabled and "file:~/.kaggle/kaggle.json" in av.reason and KEY not in av.reason
    assert "GPU quota" in provider.check().reason
    assert fake.requests[-1][2].startswith("Basic ")


def test_the_fake_refuses_fields_the_sdk_does_not_have(fake: FakeKaggle) -> None:
    status, body = fake.rpc(
        "/v1/kernels.KernelsApiService/SaveKernel", b'{"slug": "a/b", "quantity": 1}', ""
    )
    assert status == 400 and body["code"] == 400
    status, _ = fake.rpc("/v1/kernels.KernelsApiService/SaveKernel", b'{"slug": 5}', "")
    assert status == 400


# -- cloudgpu launch on Kaggle --------------------------------------------------------

JOB = """\
name: kag
resources:
  gpu: T4
  providers: [kaggle]
data:
  - {src: ./dataset, dst: /nvme/data}
env:
  GREETING: hello
run: |
  echo "$GREETING from kaggle, data: $(cat $CLOUDGPU_NVME/data/shards/*.txt | wc -l) lines"
  mkdir -p $CLOUDGPU_NVME/out/sub
  cat $CLOUDGPU_NVME/data/shards/*.txt | sha256sum | cut -c1-16 > $CLOUDGPU_NVME/out/sub/digest.txt
  %s
outputs:
  - {src: /nvme/out, dst: ./results}
limits:
  max_runtime: %s
"""


@pytest.fixture
def launch_env(
    fake: FakeKaggle, cloudgpu_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    write_config(
        cloudgpu_home,
        f'[providers.kaggle]\napi_url = "{fake.base_url}"\nbackoff_s = 0\n'
        "[providers.local]\nenabled = false\n",
    )
    monkeypatch.setenv("KAGGLE_API_TOKEN", TOKEN)
    monkeypatch.setenv("KAGGLE_USERNAME", USER)
    shards = tmp_path / "dataset" / "shards"
    shards.mkdir(parents=True)
    for i in range(3):
        (shards / f"{i}.txt").write_text("".join(f"line {i}-{n}\n" for n in range(5)))
    return tmp_path


def _digest(tmp_path: Path) -> str:
    text = "".join((tmp_path / "dataset" / "shards" / f"{i}.txt").read_text() for i in range(3))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_launch_runs_the_job_as_a_kernel_and_cleans_up(
    launch_env: Path, fake: FakeKaggle, cloudgpu_home: Path
) -> None:
    tmp_path = launch_env
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "mine.txt").write_text("kept")  # the user's own file stays
    job = job_file(tmp_path, JOB % ("", "30m"))
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert "hello from kaggle, data: 15 lines" in out
    assert (tmp_path / "results" / "sub" / "digest.txt").read_text().strip() == _digest(tmp_path)
    assert (tmp_path / "results" / "mine.txt").read_text() == "kept"
    assert "no live log on this provider" in err
    # Everything made on Kaggle is gone; data went up as one private dataset.
    assert fake.kernels == {} and fake.datasets == {}
    assert fake.calls().count("SaveKernel") == 1 and "CreateDataset" in fake.calls()
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "succeeded"
    (inst,) = store(cloudgpu_home).instances(rec.id)
    assert inst.state == "terminated" and inst.provider == "kaggle"
    log = Path(rec.log_path).read_text()
    assert TOKEN not in log and TOKEN not in out + err


def test_a_failing_job_keeps_its_exit_code_and_log(
    launch_env: Path, fake: FakeKaggle, cloudgpu_home: Path
) -> None:
    job = job_file(launch_env, JOB % ("echo about to fail; exit 3", "30m"))
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code != 0 and "exit code 3" in err
    assert "about to fail" in out
    # Outputs written before the failure still come back.
    assert (launch_env / "results" / "sub" / "digest.txt").exists()
    assert fake.kernels == {} and fake.datasets == {}


def test_used_up_weekly_quota_fails_over_and_creates_nothing(
    launch_env: Path, fake: FakeKaggle
) -> None:
    fake.gpu_used_s = fake.gpu_total_s
    job = job_file(launch_env, JOB % ("", "30m"))
    code, _out, err = main_exit(["launch", str(job), "--yes"])
    assert code != 0
    assert "weekly GPU quota used up (30.0 of 30.0 h)" in err
    assert "SaveKernel" not in fake.calls() and fake.kernels == {} and fake.datasets == {}


def four_second_sessions(cloudgpu_home: Path, fake: FakeKaggle) -> None:
    """Kaggle alone, its sessions 4 s long (0.00111 h), so a run outlives one."""
    write_config(
        cloudgpu_home,
        f'[providers.kaggle]\napi_url = "{fake.base_url}"\nbackoff_s = 0\n'
        "session_hours = 0.00111\n[providers.local]\nenabled = false\n",
    )


def test_the_run_is_stopped_before_the_session_limit(
    launch_env: Path, fake: FakeKaggle, cloudgpu_home: Path
) -> None:
    # A 4-second session: the runner stops the run a tenth of it before the end, so the
    # outputs are still saved and the status says why.
    four_second_sessions(cloudgpu_home, fake)
    job = job_file(launch_env, JOB % ("sleep 30", "30m"))
    code, _out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 124, err
    assert "stopped at the provider's session limit" in err
    assert (launch_env / "results" / "sub" / "digest.txt").exists()
    assert fake.kernels == {}


def test_kaggle_killing_the_session_is_reported(
    launch_env: Path, fake: FakeKaggle, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_file(launch_env, JOB % ("sleep 30", "30m"))
    original = fake._SaveKernel

    def short_session(req):  # type: ignore[no-untyped-def]
        req.session_timeout_seconds = 1
        return original(req)

    monkeypatch.setattr(fake, "_SaveKernel", short_session)
    code, _out, err = main_exit(["launch", str(job), "--yes"])
    assert code != 0
    assert "without a result: Your notebook exceeded its session time limit" in err, err
    assert fake.kernels == {} and fake.datasets == {}


def test_a_lost_save_answer_does_not_push_twice(
    provider: KaggleProvider, offer: Offer, fake: FakeKaggle
) -> None:
    fake.drop_answer_once.add("SaveKernel")
    req = TestKaggleContract().request(offer)
    inst = provider.create(req)
    try:
        assert fake.calls().count("SaveKernel") == 1
        assert list(fake.kernels) == [inst.id]
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state == InstanceState.TERMINATED


def _kill_kernel(pid: int) -> None:
    """SIGKILL process group ``pid`` and the groups of its children (stopped first, so
    no child is started between the look and the kill)."""
    os.killpg(pid, signal.SIGSTOP)
    groups = {pid}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # ppid; fields[2] is the child's process group
            groups.add(int(fields[2]))
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_hostile_output_names_write_nothing_outside(
    provider: KaggleProvider, offer: Offer, fake: FakeKaggle, tmp_path: Path
) -> None:
    inst = provider.create(TestKaggleContract().request(offer))
    try:
        k = fake.kernels[inst.id]
        provider.describe(inst.id)
        provider.describe(inst.id)  # queued, then started
        assert k.proc is not None
        # The whole session ends: the kernel's group and the job's own session (the
        # runner starts the job's `sleep 60` with setsid), which holds the kernel's output
        # pipe open; killing the kernel's group alone left the fake waiting ~60 s for EOF.
        _kill_kernel(k.proc.pid)
        k.proc.wait()
        wait_for(lambda: k.status in ("COMPLETE", "ERROR"), what="the kernel to end")
        evil = k.root / "working" / OUTPUTS / "nvme" / "out"
        evil.mkdir(parents=True)
        (evil / "ok.txt").write_text("fine")
        outside = tmp_path / "outside.txt"
        original = fake._ListKernelSessionOutput

        def hostile(req):  # type: ignore[no-untyped-def]
            status, answer = original(req)
            url = answer["files"][0]["url"] if answer["files"] else ""
            answer["files"].append({"url": url, "fileName": f"{OUTPUTS}/nvme/out/../../../x"})
            return status, answer

        fake._ListKernelSessionOutput = hostile  # type: ignore[method-assign]
        dest = tmp_path / "dest"
        with pytest.raises(ProviderError, match="unsafe output name"):
            provider.fetch_output(inst, "/nvme/out", dest)
        assert not outside.exists() and not (tmp_path / "x").exists()
    finally:
        provider.terminate(inst.id)


RESUMABLE = """\
name: kag-long
resources:
  gpu: T4
  providers: [kaggle]
checkpoint: /nvme/ckpt
run: |
  mkdir -p $CLOUDGPU_CHECKPOINT
  n=$(cat $CLOUDGPU_CHECKPOINT/step 2>/dev/null || echo 0); n=$((n+1))
  echo $n > $CLOUDGPU_CHECKPOINT/step
  echo "session run $n"
  if [ $n -lt 3 ]; then sleep 60; fi
  mkdir -p $CLOUDGPU_NVME/out && echo "finished after $n" > $CLOUDGPU_NVME/out/done.txt
outputs:
  - {src: /nvme/out, dst: ./results}
"""


def test_a_job_longer_than_a_session_continues_from_its_checkpoint(
    launch_env: Path, fake: FakeKaggle, cloudgpu_home: Path
) -> None:
    four_second_sessions(cloudgpu_home, fake)
    job = job_file(launch_env, RESUMABLE)
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert (launch_env / "results" / "done.txt").read_text().strip() == "finished after 3"
    assert [ln for ln in out.splitlines() if ln.startswith("session run")] == [
        "session run 1",
        "session run 2",
        "session run 3",
    ]
    assert "continuing from the checkpoint in session 3" in err
    assert fake.calls().count("SaveKernel") == 3 and fake.kernels == {}
    (rec,) = store(cloudgpu_home).jobs()
    assert [i.state for i in store(cloudgpu_home).instances(rec.id)] == ["terminated"] * 3


def test_a_kaggle_dataset_source_is_mounted_and_copied(launch_env: Path, fake: FakeKaggle) -> None:
    shared = launch_env / "published"
    shared.mkdir()
    (shared / "train.csv").write_text("a,b\n1,2\n3,4\n")
    fake.datasets["someone/tiny-table"] = {"files": {"train.csv": shared / "train.csv"}}
    job = job_file(
        launch_env,
        "name: kds\nresources: {gpu: T4, providers: [kaggle]}\n"
        "data:\n  - {src: 'kaggle://someone/tiny-table', dst: /nvme/table}\n"
        "run: wc -l < $CLOUDGPU_NVME/table/train.csv\n",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert out.strip().splitlines()[-2:][0].strip() in ("3", "[cloudgpu] run ended with status 0")
    assert "3\n" in out
    (save,) = [b for name, b, _ in fake.requests if name.endswith("SaveKernel")]
    assert save["datasetDataSources"] == ["someone/tiny-table"]
    assert "CreateDataset" not in fake.calls()  # nothing uploaded for a Kaggle dataset
    assert "someone/tiny-table" in fake.datasets  # and someone else's dataset is left alone


@pytest.mark.slow
def test_no_shell_on_kaggle_and_down_deletes_a_running_kernel(
    launch_env: Path, fake: FakeKaggle, cloudgpu_home: Path
) -> None:
    job = job_file(launch_env, "name: kbg\nresources: {gpu: T4, providers: [kaggle]}\n"
                   "run: echo up; sleep 120\n")  # fmt: skip
    env = {"KAGGLE_API_TOKEN": TOKEN, "KAGGLE_USERNAME": USER}
    res = cli_proc(["launch", str(job), "--yes", "--detach"], cloudgpu_home, env=env)
    assert res.returncode == 0, res.stderr
    (rec,) = store(cloudgpu_home).jobs()
    wait_for(lambda: bool(fake.kernels), what="the kernel to be pushed")
    wait_for(lambda: store(cloudgpu_home).job(rec.id).state == "running", what="running")
    for cmd in (["ssh", rec.id], ["exec", rec.id, "--", "nvidia-smi"]):
        got = cli_proc(cmd, cloudgpu_home, env=env)
        assert got.returncode == 2, got.stderr
        assert "kaggle runs jobs as batch submissions: there is no shell" in got.stderr
        assert "Traceback" not in got.stderr
    down = cli_proc(["down", rec.id, "--yes"], cloudgpu_home, env=env)
    assert down.returncode == 0, down.stderr
    wait_for(lambda: fake.kernels == {}, what="the kernel deleted")
    assert [i.state for i in store(cloudgpu_home).instances(rec.id)] == ["terminated"]


def test_provider_data_sources_pin_the_job_to_that_provider(launch_env: Path) -> None:
    body = "name: kds\nresources: {gpu: T4%s}\ndata:\n  - {src: '%s', dst: /nvme/t}\nrun: 'true'\n"
    cases = {
        ("", "kaggle://someone/tiny"): "kaggle:// data is held by the kaggle provider",
        (", providers: [aws]", "kaggle://someone/tiny"): "expected resources.providers: [kaggle]",
        (", providers: [kaggle]", "ftpx://host/x"): "ftpx:// sources are not supported",
    }
    for (providers, src), message in cases.items():
        job = job_file(launch_env, body % (providers, src))
        for cmd in (["schema", "--check", str(job)], ["plan", str(job)], ["launch", str(job)]):
            code, _out, err = main_exit(cmd)
            assert code == 2 and message in err and "data[0].src" in err, (cmd, err)
