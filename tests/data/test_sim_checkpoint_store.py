"""A checkpoint kept in an object store: synced there by the instance while the job runs,
and pulled from there by the next instance after a preemption (sim cloud, moto S3 behind
the checking gate). The client sends and reads no checkpoint byte."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu import remote
from cloudgpu.lifecycle.launch import create_job
from cloudgpu.lifecycle.run import JobRun, LaunchOptions
from cloudgpu.spec import load_job
from tests.data.stores import StoreUnderTest, bucket_uri, direct_read, mixed, s3_store
from tests.faults.simkit import deps_for, preempt_when, step_at_least
from tests.lifecycle.helpers import job_file
from tests.lifecycle.test_sim_e2e import configure, live_sim, offer

pytestmark = pytest.mark.slow


@pytest.fixture
def s3() -> Iterator[StoreUnderTest]:
    with s3_store(mixed(small=1, large_mb=0)) as s:
        yield s


def test_preempted_job_resumes_from_the_checkpoint_in_the_store(
    s3: StoreUnderTest, tmp_path: Path, cloudgpu_home: Path
) -> None:
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    dst = bucket_uri(s3, "ckpt/counter")
    body = f"""
name: counter
resources: {{gpu: L4, spot: auto, providers: [sim]}}
checkpoint: {{path: /nvme/ckpt, sync_every: 1s, dst: {dst}}}
run: |
  mkdir -p $CLOUDGPU_NVME/ckpt $CLOUDGPU_NVME/out
  step=$(cat $CLOUDGPU_NVME/ckpt/step 2>/dev/null || echo 0)
  echo "starting at $step" | tee -a $CLOUDGPU_NVME/out/starts
  pace=0.25; [ "$step" -gt 0 ] && pace=0.02  # resumed: no preemption left to wait for
  while [ "$step" -lt 60 ]; do  # a checkpoint every 8 steps, written whole, then renamed
    step=$((step + 1)); sleep $pace
    if [ $((step % 8)) = 0 ]; then
      echo $step > $CLOUDGPU_NVME/c.tmp && mv $CLOUDGPU_NVME/c.tmp $CLOUDGPU_NVME/ckpt/step
    fi
  done
outputs:
  - {{src: /nvme/out, dst: ./results}}
"""
    deps = deps_for(cloudgpu_home, remote.connect)
    deps.env = {**deps.env, **s3.env}
    job = load_job(job_file(tmp_path, body))
    assert job.checkpoint_dst == dst
    create_job(deps.store, job, "counter-000001", str(deps.paths.logs_dir / "guard.log"))
    # No notice, once a sync has reached the store: the copy there is all there is.
    at_step = step_at_least(16)
    synced = lambda d: at_step(d) and direct_read(s3, "ckpt/counter/step") is not None  # noqa: E731
    preempt_when(cloudgpu_home, synced, notice=0.0)
    JobRun(
        deps, "counter-000001", job, deps.provider("sim").offers(), LaunchOptions(grace_s=1)
    ).execute()

    resumed_at = int((tmp_path / "results" / "starts").read_text().split()[-1])
    assert 5 <= resumed_at < 60  # the second instance started from the store's copy
    assert direct_read(s3, "ckpt/counter/step") is not None
    log = (deps.paths.logs_dir / "guard.log").read_text()
    assert "checkpoint restored to /nvme/ckpt from s3://training/ckpt/counter" in log
    assert "uploaded by the instance" in log
    # This process only listed and signed: every checkpoint byte moved instance <-> store.
    assert s3.client_object_reads() == []
    assert max((h.sent_bytes for h in s3.gate.hits if h.from_client), default=0) < 4096
    assert not (deps.paths.data_dir / "checkpoints" / "counter-000001").exists()
    assert deps.store.job("counter-000001").state == "succeeded"
    assert live_sim(cloudgpu_home) == []
