"""Live Kaggle test: `cloudgpu launch` of a tiny job on Kaggle's free P100, its log and
output brought back, and the kernel and its dataset deleted afterwards.

Runs only with real Kaggle credentials (KAGGLE_API_TOKEN + KAGGLE_USERNAME, or
~/.kaggle/kaggle.json) AND ``CLOUDGPU_LIVE=1`` (tests/live/live_kit.py); skipped
everywhere else, CI included. Costs nothing but a few minutes of the week's GPU quota.
"""

from __future__ import annotations

from pathlib import Path

from cloudgpu_providers.kaggle.api import find_credentials

from tests.lifecycle.helpers import job_file, main_exit, store
from tests.live.live_kit import ENV, live_marks

pytestmark = live_marks(
    "live Kaggle test: needs Kaggle credentials",
    lambda: find_credentials(ENV, {}) is not None,
)

JOB = """\
name: live-kaggle
resources: {gpu: P100, providers: [kaggle]}
data:
  - {src: ./data, dst: /nvme/data}
run: |
  nvidia-smi --query-gpu=name --format=csv,noheader
  mkdir -p $CLOUDGPU_NVME/out && wc -l < $CLOUDGPU_NVME/data/lines.txt > $CLOUDGPU_NVME/out/n
outputs:
  - {src: /nvme/out, dst: ./results}
limits: {max_runtime: 30m}
"""


def test_a_small_job_runs_on_kaggle_and_leaves_nothing(tmp_path: Path, cloudgpu_home: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "lines.txt").write_text("one\ntwo\nthree\n")
    code, out, err = main_exit(["launch", str(job_file(tmp_path, JOB)), "--yes"])
    assert code == 0, err
    assert "P100" in out
    assert (tmp_path / "results" / "n").read_text().strip() == "3"
    (rec,) = store(cloudgpu_home).jobs()
    assert [i.state for i in store(cloudgpu_home).instances(rec.id)] == ["terminated"]
    orphans = main_exit(["down", "--orphans"])
    assert orphans[0] == 0, orphans[2]
