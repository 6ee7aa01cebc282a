"""The lifecycle tests again with every process's wall clock a year ahead (libfaketime).

Fakes must stamp the times of the calls they answer; a fixed date in a recorded fixture
(the GCP fake once answered with the recorded creationTimestamp, so billing saw an
instance 11 hours old and max_cost stopped the job) fails here long before it fails on
the calendar. The monotonic clock stays real (timeouts and sleeps keep working).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LIBS = [
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1"),
    Path("/usr/lib/faketime/libfaketimeMT.so.1"),
]
# Where a recorded time meets the real clock: every provider's lifecycle against its fake
# (launch, billing, failover, spot notices), billing, preemption notices, the sim's
# preemption and instance-side deadline, Kaggle's quota. The subprocess variants repeat
# the in-process ones and are left out to keep this run to a few minutes.
AHEAD = [
    "tests/providers/test_aws_lifecycle.py",
    "tests/providers/test_gcp_lifecycle.py",
    "tests/providers/test_azure_lifecycle.py",
    "tests/providers/test_api_clouds_lifecycle.py",  # Lambda, RunPod, Vast
    "tests/providers/test_kaggle.py",
    "tests/costs/test_billing.py",
    "tests/lifecycle/test_notice.py",
    "tests/lifecycle/test_sim_e2e.py::test_preemption_and_resume",
    "tests/lifecycle/test_sim_e2e.py::test_instance_deadline_without_client",
]
SKIP = "not as_subprocess"

pytestmark = pytest.mark.slow


def faketime_lib() -> Path:
    for lib in LIBS:
        if lib.exists():
            return lib
    pytest.fail("libfaketime is missing: `make sysdeps` installs Debian's faketime package")


def ahead_env(days: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=str(faketime_lib()),
        FAKETIME=f"+{days}d",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")])),
    )
    return env


def test_the_clock_really_is_ahead_in_children() -> None:
    env = ahead_env(365)
    code = "import datetime,time; time.sleep(0.05); print(datetime.date.today().isoformat())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    shown = subprocess.run(
        ["date", "-u", "+%Y-%m-%d"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    expected = (dt.datetime.now(dt.UTC) + dt.timedelta(days=365)).date()
    assert abs((dt.date.fromisoformat(out) - expected).days) <= 1
    assert shown == out


@pytest.mark.timeout(1200)
def test_lifecycle_suite_passes_a_year_from_now(tmp_path: Path) -> None:
    # Two halves at once: the lifecycle tests mostly wait on their loopback clouds, so two
    # pytest processes on two cores take about half the time of one.
    halves = (AHEAD[0::2], AHEAD[1::2])
    procs = []
    for i, half in enumerate(halves):
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += ["--basetemp", str(tmp_path / f"t{i}"), "-k", SKIP, *half]
        out = open(tmp_path / f"out{i}.txt", "w+")  # noqa: SIM115 (closed below)
        procs.append((subprocess.Popen(argv, cwd=ROOT, env=ahead_env(365), stdout=out,
                                       stderr=subprocess.STDOUT, text=True), out))  # fmt: skip
    failed = []
    for proc, out in procs:
        try:
            rc = proc.wait(timeout=1150)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        out.seek(0)
        if rc != 0:
            failed.append(out.read()[-6000:])
        out.close()
    assert not failed, "\n".join(failed)
