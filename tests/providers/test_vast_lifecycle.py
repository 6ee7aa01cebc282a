"""Vast gives no notice: an interruptible (bid) machine that is outbid simply stops. The
lifecycle must take it for a preemption all the same (its state, read from the API, says
so): stop the job, re-provision without that offer, resume from the checkpoint the
periodic sync brought back, and finish; nothing left billing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.vast.server import FakeVast
from tests.lifecycle.helpers import main_exit
from tests.providers.conftest import ApiLaunch
from tests.providers.lifecycle_kit import RESUMABLE_RUN, announce_when_progressed, machines_on
from tests.remote.sshd import SSHDServer

pytestmark = pytest.mark.slow

JOB = (
    "name: vast-bid\nresources:\n  gpu: RTXA6000:4\n  spot: auto\n  providers: [vast]\n"
    + RESUMABLE_RUN.replace(
        "checkpoint: /nvme/ckpt", "checkpoint: {path: /nvme/ckpt, sync_every: 1s}"
    )
)


def test_an_outbid_machine_without_notice_resumes_from_its_checkpoint(
    sshd: SSHDServer, scratch: Path, api_launch: ApiLaunch
) -> None:
    with machines_on(FakeVast(), sshd) as fake:
        job = api_launch(fake, "vast", "api_url", "VAST_API_KEY", JOB)
        code, _, err = main_exit(["catalog", "refresh", "--provider", "vast"])  # bids too
        assert code == 0, err

        def outbid() -> None:
            (iid,) = [i for i, m in fake.instances.items() if m["actual_status"] == "running"]
            fake.outbid(iid)

        with announce_when_progressed(scratch, outbid):
            code, out, err = main_exit(["launch", str(job), "--yes"])
        assert code == 0, err
        starts = [int(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("starting at")]
        assert starts[0] == 0 and len(starts) == 2 and 0 < starts[1] < 30, out
        assert "done at step 30" in out
        assert "re-provisioning without" in err, err
        assert [m["actual_status"] for m in fake.instances.values()] == [], fake.instances
