"""The fault matrix on the sim cloud: real sshd instances, real transfers, real signals.

Every case starts from a user's results directory holding a file of their own and the
previous run's output, hits the job with one fault at one stage, recovers as documented
(nothing, or `down --orphans --yes`), then checks: no instance or record left billing,
the user's file unchanged, the output either the previous one or the complete new one
(never truncated, no partial files), and every exit status true to what happened.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudgpu import remote
from cloudgpu.errors import CloudGPUError, RemoteError
from tests.faults.record import Case, digest, partials
from tests.faults.simkit import DropPlan, job_state, launch_proc, preempt_when, run_job
from tests.lifecycle.helpers import cli_proc, job_file, store, wait_for
from tests.lifecycle.test_sim_e2e import configure, live_sim, offer, sim
from tests.remote.test_agent_hostile import Crafted, download

pytestmark = pytest.mark.slow

MINE = b"the user's own notes\n"
OLD = b"last week's model\n"
SIZE = 3_000_000  # the output the job writes: `yes cloudgpu | head -c SIZE`


def new_output(size: int = SIZE) -> bytes:
    unit = b"cloudgpu\n"
    return (unit * (size // len(unit) + 1))[:size]


NEW = hashlib.sha256(new_output()).hexdigest()


@pytest.fixture(autouse=True)
def sweep(cloudgpu_home: Path) -> Iterator[None]:
    yield
    p = sim(cloudgpu_home)
    for d in sorted((cloudgpu_home / "data" / "sim").glob("sim-*")):
        p.terminate(d.name)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    r = tmp_path / "results"
    r.mkdir()
    (r / "mine.txt").write_bytes(MINE)
    (r / "model.bin").write_bytes(OLD)
    return r


def job_body(
    name: str,
    *,
    data: bool = False,
    run_extra: str = "",
    spot: bool = False,
    big_out: int = 0,
) -> str:
    lines = [
        f"name: {name}",
        f"resources: {{gpu: L4, spot: {'auto' if spot else 'false'}}}",
        "checkpoint: {path: /nvme/ckpt, sync_every: 1s}",
    ]
    if data:
        lines.append("data: [{src: ./dataset, dst: /nvme/data}]")
    lines += [
        "run: |",
        "  mkdir -p $CLOUDGPU_NVME/out $CLOUDGPU_NVME/ckpt",
        f"  yes cloudgpu | head -c {SIZE} > $CLOUDGPU_NVME/out/model.bin",
    ]
    if big_out:
        lines.append(f"  head -c {big_out} /dev/zero > $CLOUDGPU_NVME/out/blob")
    if data:
        lines.append("  test $(ls $CLOUDGPU_NVME/data | wc -l) -eq 4")
    lines += [f"  {ln}" for ln in run_extra.splitlines() if ln]
    lines += ["outputs:", "  - {src: /nvme/out, dst: ./results}"]
    return "\n".join(lines) + "\n"


def dataset(tmp_path: Path, each: int = 50_000_000) -> None:
    d = tmp_path / "dataset"
    d.mkdir()
    for i in range(4):
        (d / f"part-{i}").write_bytes(os.urandom(each))


def leaks(home: Path) -> int:
    return len(live_sim(home)) + len(store(home).instances(live_only=True))


def files_lost(results: Path) -> tuple[bool, str]:
    """(lost, what the user has): their file unchanged; the output old or complete."""
    now = digest(results)
    mine_ok = now.get("mine.txt") == hashlib.sha256(MINE).hexdigest()
    model = now.get("model.bin")
    if model == NEW:
        out = "outputs complete"
    elif model == hashlib.sha256(OLD).hexdigest():
        out = "previous outputs kept"
    else:
        out = "outputs TRUNCATED"
    lost = not mine_ok or out == "outputs TRUNCATED" or bool(partials(results))
    return lost, out + ("" if mine_ok else "; user file CHANGED")


# -- kill -9 of the client at each stage -------------------------------------------------


def _at(stage: str, home: Path, results: Path) -> Callable[[], bool]:
    if stage == "teardown":
        return lambda: any(
            e["kind"] == "state" and e["message"] == "tearing_down"
            for j in store(home).jobs()
            for e in store(home).events(j.id)
        )
    if stage == "collecting":
        return lambda: job_state(home) == "collecting" and bool(partials(results))
    if stage == "provisioning":
        return lambda: job_state(home) == "provisioning" and bool(live_sim(home))
    return lambda: job_state(home) == stage


KILL_STAGES = ["provisioning", "staging", "running", "collecting", "teardown"]


@pytest.mark.parametrize("stage", KILL_STAGES)
def test_kill9(case: Case, stage: str, tmp_path: Path, cloudgpu_home: Path, results: Path) -> None:
    case.cloud, case.fault, case.stage = "sim", "kill -9 of the client", stage
    configure(
        cloudgpu_home, [offer("sim.small", 0.9)], boot_delay=3.0 if stage == "provisioning" else 0
    )
    dataset(tmp_path, 100_000_000 if stage == "staging" else 10)
    body = job_body(
        f"kill-{stage}",
        data=True,
        big_out=600_000_000 if stage == "collecting" else 0,
        run_extra="sleep 60" if stage == "running" else "",
    )
    proc = launch_proc(job_file(tmp_path, body), cloudgpu_home)
    try:
        wait_for(_at(stage, cloudgpu_home, results), timeout=180, what=stage)
    finally:
        proc.kill()
        proc.wait()
    res = cli_proc(["down", "--orphans", "--yes"], cloudgpu_home, env={"CLOUDGPU_SIM": "1"})
    lost, out = files_lost(results)
    jobs = store(cloudgpu_home).jobs()
    case.check(
        leaks=leaks(cloudgpu_home),
        data_lost=lost,
        exit_ok=res.returncode == 0 and proc.returncode == -signal.SIGKILL,
        outcome=f"`down --orphans` exit {res.returncode}; {out}; job {jobs[0].state}",
    )


# -- signals while running ---------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=str)
def test_signal_while_running(
    case: Case, sig: signal.Signals, tmp_path: Path, cloudgpu_home: Path, results: Path
) -> None:
    case.cloud, case.fault, case.stage = "sim", sig.name, "running"
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    body = job_body(
        "signalled",
        run_extra="for i in $(seq 600); do echo $i > $CLOUDGPU_NVME/ckpt/step; sleep 0.1; done",
    )
    proc = launch_proc(job_file(tmp_path, body), cloudgpu_home)
    try:
        wait_for(lambda: job_state(cloudgpu_home) == "running", timeout=120, what="running")
        time.sleep(1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    lost, out = files_lost(results)
    saved = list((cloudgpu_home / "data" / "checkpoints").glob("*/step"))
    case.check(
        leaks=leaks(cloudgpu_home),
        data_lost=lost or out != "outputs complete" or not saved,
        exit_ok=proc.returncode == 130 and "interrupted: stopping the job" in err.decode(),
        outcome=f"exit {proc.returncode}; {out}; checkpoint flushed: {bool(saved)}",
    )


# -- SSH dropped under a healthy instance ------------------------------------------------


DROP = {  # drops, expected exit, expected outputs, what the log says it did
    "staging": (2, 0, "outputs complete", "reconnecting (attempt 3)"),
    "running": (1, 0, "outputs complete", "the job runs on: reconnecting to follow it"),
    "collecting": (2, 0, "outputs complete", "collecting again in"),
}


@pytest.mark.parametrize("stage", list(DROP))
def test_ssh_dropped(
    case: Case, stage: str, tmp_path: Path, cloudgpu_home: Path, results: Path
) -> None:
    case.cloud, case.fault, case.stage = "sim", "SSH dropped (instance healthy)", stage
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    dataset(tmp_path, 5_000_000)
    drops, want_exit, want_out, said = DROP[stage]
    kind = {"staging": "stage", "running": "run", "collecting": "collect"}[stage]
    body = job_body("dropped", data=True, run_extra=TICKS if stage == "running" else "")
    code, why = _run(cloudgpu_home, tmp_path, DropPlan(drops, kind), body)
    lost, out = files_lost(results)
    log = (cloudgpu_home / "data" / "logs" / "guard.log").read_text()
    ticks = re.findall(r"^tick (\d+)$", log, re.M)
    whole = stage != "running" or ticks == [str(i) for i in range(1, 31)]
    case.check(
        leaks=leaks(cloudgpu_home),
        data_lost=lost or out != want_out or not whole,
        exit_ok=code == want_exit and said in log,
        outcome=f"exit {code}{why}; {out}; log: {said}"
        + ("; the job's output whole, each line once" if stage == "running" and whole else ""),
    )


# The job's output across the drop: 30 lines over 3 s, each must reach the log once.
TICKS = 'for i in $(seq 1 30); do echo "tick $i"; sleep 0.1; done'


CKPT_V1 = b"a" * 2_000_000  # the first checkpoint; the second is two 10 MB files of noise
CKPT_STEPS = """\
N=$CLOUDGPU_NVME; head -c 2000000 /dev/zero | tr '\\0' a > $N/v1 && mv $N/v1 $N/ckpt/state.bin
sleep 3
for f in a-part state; do head -c 10000000 /dev/urandom > $N/$f; done
mv $N/a-part $N/ckpt/a-part.bin && mv $N/state $N/ckpt/state.bin
sleep 4
"""


def test_ssh_dropped_during_a_checkpoint_sync(
    case: Case, cloudgpu_home: Path, tmp_path: Path, results: Path
) -> None:
    """The periodic sync that brings the second checkpoint back is cut once its first
    file arrived: the local copy must still be the first checkpoint, whole (no file of
    the second, no partial file); the job runs on, followed over a new connection, and
    succeeds."""
    case.cloud, case.fault, case.stage = "sim", "SSH dropped during a checkpoint sync", "running"
    configure(cloudgpu_home, [offer("sim.small", 0.9)])
    v1 = {"state.bin": hashlib.sha256(CKPT_V1).hexdigest()}
    plan = DropPlan(1, "ckpt", ckpt_due=lambda local: digest(local) == v1)
    code, why = _run(cloudgpu_home, tmp_path, plan, job_body("ckptcut", run_extra=CKPT_STEPS))
    lost, out = files_lost(results)
    held, parts = plan.after_cut or ({}, [])
    log = (cloudgpu_home / "data" / "logs" / "guard.log").read_text()
    case.check(
        leaks=leaks(cloudgpu_home),
        data_lost=lost or out != "outputs complete" or held != v1 or bool(parts),
        exit_ok=code == 0 and "checkpoint /nvme/ckpt not saved" in log,
        outcome=f"exit {code}{why}; {out}; local checkpoint right after the cut: "
        + ("the previous one, whole" if held == v1 and not parts else f"{held} {parts}"),
    )


def _run(home: Path, tmp_path: Path, connect: Any, body: str) -> tuple[int, str]:
    """Run in-process; (the exit status the CLI would give, the error's gist)."""
    try:
        run_job(home, tmp_path, connect, body)
    except CloudGPUError as exc:
        return exc.exit_code, f" ({str(exc).split(': ', 1)[-1][:70]})"
    return 0, ""


# -- preemption with 0, 1 and 120 s of notice ---------------------------------------------


def _staging(d: Path) -> bool:
    return (d / "nvme" / "data").is_dir() and any((d / "nvme" / "data").iterdir())


def _running(d: Path) -> bool:
    f = d / "nvme" / "ckpt" / "step"
    try:
        return int(f.read_text() or 0) >= 10
    except (OSError, ValueError):
        return False


PREEMPT_EXPECT = {  # stage -> notice -> (exit, outputs)
    "staging": {
        0.0: (0, "outputs complete"),
        1.0: (0, "outputs complete"),
        120.0: (0, "outputs complete"),
    },
    "running": {
        0.0: (0, "outputs complete"),
        1.0: (0, "outputs complete"),
        120.0: (0, "outputs complete"),
    },
    "collecting": {
        0.0: (5, "previous outputs kept"),  # gone mid-collect: reported lost, never re-run
        1.0: (5, "previous outputs kept"),
        120.0: (0, "outputs complete"),  # the notice leaves time to finish collecting
    },
}


@pytest.mark.parametrize("notice", [0.0, 1.0, 120.0], ids=lambda n: f"{n:g}s-notice")
@pytest.mark.parametrize("stage", list(PREEMPT_EXPECT))
def test_preempted(
    case: Case, stage: str, notice: float, tmp_path: Path, cloudgpu_home: Path, results: Path
) -> None:
    case.cloud, case.fault, case.stage = "sim", f"spot preemption, {notice:g} s notice", stage
    configure(cloudgpu_home, [offer("sim.spot", 0.3, "spot"), offer("sim.od", 0.9)])
    dataset(tmp_path, 50_000_000 if stage == "staging" else 10)
    # 0.1 s a step until the preemption has landed: a run that finds the checkpoint back
    # steps at 0.01 s, and so does every run when it lands in staging, before the loop.
    pace = "0.01" if stage == "staging" else "0.1"
    steps = (
        f"p={pace}; [ -s $CLOUDGPU_NVME/ckpt/step ] && p=0.01\n"
        "for i in $(seq 40); do echo $i > $CLOUDGPU_NVME/ckpt/step; sleep $p; done"
    )
    body = job_body(
        "preempted",
        data=True,
        spot=True,
        run_extra=steps + "\necho ran >> $CLOUDGPU_NVME/out/runs",
        big_out=600_000_000 if stage == "collecting" else 0,
    )
    home = cloudgpu_home
    trigger = {
        "staging": _staging,
        "running": _running,
        "collecting": lambda d: job_state(home) == "collecting" and bool(partials(results)),
    }[stage]
    preempt_when(home, trigger, notice)
    code, why = _run(home, tmp_path, remote.connect, body)
    lost, out = files_lost(results)
    want_exit, want_out = PREEMPT_EXPECT[stage][notice]
    runs = (results / "runs").read_text().count("ran") if (results / "runs").exists() else 0
    insts = [(i.market, i.state) for i in store(home).instances()]
    case.check(
        leaks=leaks(home),
        data_lost=lost or out != want_out or runs > 1,
        exit_ok=code == want_exit,
        outcome=f"exit {code}{why}; {out}; instances {insts}",
    )


# -- a hostile instance ------------------------------------------------------------------


def test_hostile_transfer_stream(case: Case, tmp_path: Path) -> None:
    """A crafted stream through the client's real download path: every attack refused,
    nothing outside the destination touched, files the user had kept."""
    case.cloud, case.fault, case.stage = "any", "crafted transfer stream", "collecting"
    victim = tmp_path / "home" / ".ssh"
    victim.mkdir(parents=True)
    (victim / "authorized_keys").write_bytes(b"ssh-ed25519 AAAA user\n")
    dst = tmp_path / "results"
    dst.mkdir()
    (dst / "x").symlink_to(victim)
    (dst / "model.bin").write_bytes(OLD)
    before = digest(victim), digest(dst)
    refused = 0
    attacks: list[Callable[[Crafted], Any]] = [
        lambda c: c.file(b"x/authorized_keys", b"attacker\n"),
        lambda c: c.file(b"../escape", b"x"),
        lambda c: c.file(b"/etc/evil", b"x"),
        lambda c: c.link(b"", str(victim).encode()),
        lambda c: (c.file(b"model.bin", b"half"), setattr(c, "total", 1)),
    ]
    for attack in attacks:
        c = Crafted()
        attack(c)
        try:
            download(c.bytes(), dst)
        except RemoteError:
            refused += 1
    after = digest(victim), digest(dst)
    case.check(
        leaks=0,
        data_lost=after != before or bool(partials(dst)),
        exit_ok=refused == len(attacks),
        outcome=f"{refused} of {len(attacks)} crafted streams refused; nothing written",
    )
