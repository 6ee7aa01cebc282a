"""`cloudgpu launch job.yaml`: pick the cheapest fitting offer, run the job, tear down.

Exit status: the job's own exit code when its setup or run fails (1 when that code is
one of cloudgpu's own); otherwise 0, or one of cloudgpu.errors' EXIT_* codes (2 bad input
/ nothing fits, 4 provider or teardown, 5 SSH / outputs not collected, 6 a limit stopped
the job, 7 state store locked, 130 interrupted). Thin: the ranking
comes from the one gather + plan path (cloudgpu.planner.choose), the same as `plan`'s;
the lifecycle lives in cloudgpu.lifecycle.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import click

from cloudgpu.catalog.offer import Offer, describe_offer
from cloudgpu.cli.context import App, get_app
from cloudgpu.cli.jobs import job_dict
from cloudgpu.cli.plan import offer_json
from cloudgpu.cli.sources import choose
from cloudgpu.errors import CloudGPUError, ConfigError
from cloudgpu.lifecycle import detach, states
from cloudgpu.lifecycle.collect import COLLECT_GRACE_S, OutputsNotCollected
from cloudgpu.lifecycle.deps import build_deps
from cloudgpu.lifecycle.faults import deadline_text
from cloudgpu.lifecycle.launch import create_job, new_job_id
from cloudgpu.lifecycle.multinode import MultiNodeRun
from cloudgpu.lifecycle.options import DEFAULT_DEADLINE_S, MAX_PREEMPTIONS, LaunchOptions
from cloudgpu.lifecycle.output import PREFIX, JobLog
from cloudgpu.lifecycle.provision import Retry
from cloudgpu.lifecycle.run import JobRun
from cloudgpu.planner import Candidate
from cloudgpu.planner.choose import Choice
from cloudgpu.scaffold import copy_template, job_file_for
from cloudgpu.spec import JobSpec
from cloudgpu.state.store import Store

SHOWN = 5  # candidates printed before launching
LIFECYCLE_LOCK_WAIT_S = 600.0


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C: unwind through teardown."""


HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Signals:
    """What Ctrl-C, SIGTERM and SIGHUP (the terminal closed) do to a launch.

    The first asks ``first`` (the lifecycle's interrupt): while the job runs or its
    outputs come back, the lifecycle stops the job and collects before tearing down;
    otherwise, and on a second signal, we unwind at once (teardown still runs). After
    ``shield()`` (teardown started) signals are only reported: nothing may cut it short.
    """

    def __init__(self) -> None:
        self.count = 0
        self.shielded = False
        self.first: Callable[[], bool] | None = None

    def shield(self) -> None:
        self.shielded = True

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self.shielded:
            print(f"{PREFIX}still tearing down; please wait", file=sys.stderr, flush=True)
            return
        self.count += 1
        if self.count == 1 and self.first is not None and self.first():
            return
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


@contextmanager
def teardown_on_signals() -> Iterator[Signals]:
    """Install :class:`Signals` for SIGINT, SIGTERM and SIGHUP while the block runs."""
    sig = Signals()
    old = {s: signal.getsignal(s) for s in HANDLED}
    try:
        for s in old:
            signal.signal(s, sig.handler)
    except ValueError:  # not the main thread (e.g. inside a test runner thread)
        yield sig
        return
    try:
        yield sig
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _estimate(c: Candidate) -> str | None:
    if c.est_hours is None or c.est_cost is None:
        return None
    return f"est {c.est_hours:.1f} h, ${c.est_cost:,.2f} total"


def _show_plan(choice: Choice, deadline_s: float, *, err: bool = False) -> None:
    fits = choice.candidates
    say = lambda text: click.echo(text, err=err)  # noqa: E731
    total = len(choice.gathered.offers)
    say(f"{choice.job.name}: {len(fits)} of {total} offer(s) fit; best first:")
    for i, c in enumerate(fits[:SHOWN], 1):
        est = _estimate(c)
        many = f"{c.num_nodes} x " if c.num_nodes > 1 else ""
        line = many + describe_offer(c.offer) + (f"; {est}" if est else "")
        say(f"  {i}. {line}{'   <- launch' if i == 1 else ''}")
    if len(fits) > SHOWN:
        say(f"  ... {len(fits) - SHOWN} more (used if these have no capacity)")
    for note in choice.gathered.left_out:
        say(f"  ({note})")
    notes = choice.gathered.notes
    if notes:
        names = ", ".join(n.split(":", 1)[0] for n in notes)
        say(f"  (not used: {names}; `cloudgpu check` says why)")
    if fits:
        say(f"  instance-side deadline: {deadline_text(choice.job, fits[0].offer, deadline_s)}")


def _candidate_json(c: Candidate) -> dict[str, Any]:
    return {**offer_json(c.offer), "estimate": _estimate(c)}


def _follow(job_id: str, log_path: Path) -> dict[str, str]:
    return {
        "log": str(log_path),
        "follow": f"cloudgpu logs {job_id} -f",
        "status": f"cloudgpu status {job_id} --json",
        "stop": f"cloudgpu down {job_id}",
    }


@click.command("launch")
@click.argument("job_file", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Show what would be launched, then stop.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--detach", "-d", is_flag=True, help="Continue in the background.")
@click.option("--keep", is_flag=True, help="Leave the instance running after the job.")
@click.option(
    "--retry-until-up", is_flag=True,
    help="When no offer has capacity, walk the ranked list again (with growing waits) "
    "until one starts; resources.retry: 2h bounds it in the job file.",
)  # fmt: skip
@click.option("--verbose", "-v", is_flag=True, help="Also show details that go to the log.")
@click.option(
    "--json", "as_json", is_flag=True,
    help="JSON on stdout (the plan, the detached job and how to follow it, or the "
    "finished job); progress and the job's output go to stderr.",
)  # fmt: skip
@click.option("--foreground-of", hidden=True, default=None, help="internal: run a detached job")
def launch(job_file: str, foreground_of: str | None, **flags: Any) -> None:
    """Plan, provision, stage data, run JOB_FILE with live logs, collect outputs, tear down.

    JOB_FILE may name a starter template (quickstart, finetune, batch-inference): its
    files are copied here first unless ./NAME.yaml exists (see `cloudgpu init`).

    \b
    Exit status: the job's own exit code when its setup or run fails (1 when that
    code is one of cloudgpu's below; `status JOB --json` has it), else
      0 success, 2 bad job file or nothing fits, 4 provider error (no capacity, or a
      teardown that failed: something may still bill), 5 SSH/transfer error or outputs
      not collected (the instance is kept: `down JOB --collect`), 6 max_runtime/max_cost
      reached, 7 state store locked, 130 interrupted (SIGINT/SIGTERM/SIGHUP).
    The instance is torn down in every case unless --keep, or outputs could not be
    collected.
    """
    app = get_app()
    opts = Flags(**flags)
    if foreground_of is not None:
        _foreground(app, job_file, foreground_of, opts)
        return
    job_file, template = job_file_for(job_file, Path.cwd())
    job, choice = _plan(app, job_file, show=True, err=opts.as_json)
    offers = choice.require()
    if opts.dry_run:
        _dry_run(job, choice, opts)
        return
    if not opts.yes:
        if not sys.stdin.isatty():
            raise ConfigError("launching costs money: confirm with --yes when not interactive")
        click.confirm(f"Launch on {describe_offer(offers[0])}?", abort=True, err=True)
    if template is not None:
        # Outputs land beside the job file: copy the template out of the package first.
        written = copy_template(template, Path("."))
        click.echo(f"copied template {template.name} here ({len(written)} files)", err=True)
        job_file = str(template.job)
        job = app.load_job(job_file)
    store = app.store()
    job_id = new_job_id(job.name)
    log_path = app.paths.logs_dir / f"{job_id}.log"
    create_job(store, job, job_id, str(log_path))
    if opts.detach:
        _detached(app, store, job_file, job_id, log_path, opts)
        return
    rc = _attached(app, store, job, job_id, choice, log_path, opts)
    if rc:
        sys.exit(rc)


def _dry_run(job: JobSpec, choice: Choice, opts: Flags) -> None:
    if opts.as_json:
        fits = [_candidate_json(c) for c in choice.candidates]
        click.echo(json.dumps({"job": job.name, "launched": False, "candidates": fits}))
    else:
        click.echo("dry run: nothing launched")


def _detached(
    app: App, store: Store, job_file: str, job_id: str, log_path: Path, opts: Flags
) -> None:
    """The job goes on in a child of its own; say how to follow and stop it."""
    pid = detach_spawn(app, job_file, job_id, log_path, opts)
    store.update_job(job_id, pid=pid)
    if opts.as_json:
        doc = {"job_id": job_id, "pid": pid, "detached": True, **_follow(job_id, log_path)}
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"job {job_id} continues in the background (pid {pid})")
    click.echo(f"  follow: cloudgpu logs {job_id} -f    stop: cloudgpu down {job_id}")


def _attached(
    app: App, store: Store, job: JobSpec, job_id: str, choice: Choice, log_path: Path, opts: Flags
) -> int:
    """The job run here with live logs; its exit code (``--json``: the outcome said
    first, success or not, before any error line)."""
    click.echo(f"job {job_id}  (log: {log_path})", err=True)
    try:
        return _run(
            app, job, job_id, choice.require(), log_path, opts, terminal=True,
            nodes=choice.nodes, rates=choice.tokens_per_s,
        )  # fmt: skip
    finally:
        if opts.as_json:
            doc = job_dict(store, store.job(job_id), time.time(), app.registry.capabilities)
            click.echo(json.dumps({"job_id": job_id, **doc, **_follow(job_id, log_path)}))


@dataclass(frozen=True)
class Flags:
    """The launch flags a detached child must see again."""

    dry_run: bool = False
    yes: bool = False
    detach: bool = False
    keep: bool = False
    retry_until_up: bool = False
    verbose: bool = False
    as_json: bool = False

    def passed_on(self) -> list[str]:
        return ["--retry-until-up"] if self.retry_until_up else []


def _plan(app: App, job_file: str, *, show: bool, err: bool = False) -> tuple[JobSpec, Choice]:
    """The job and its plan, from the same gather + plan path as `plan`; ConfigError
    saying why when nothing fits."""
    job = app.load_job(job_file)
    choice = choose(app, job)
    choice.require()
    if show:
        _show_plan(choice, _seconds(app, "default_deadline", DEFAULT_DEADLINE_S), err=err)
        sys.stdout.flush()  # before the job's own output, which bypasses this text layer
    return job, choice


def _foreground(app: App, job_file: str, job_id: str, opts: Flags) -> None:
    """The detached process: the job record exists; any failure lands in it and the log."""
    store = app.store()
    log_path = app.paths.logs_dir / f"{job_id}.log"
    try:
        job, choice = _plan(app, job_file, show=False)
    except CloudGPUError as exc:
        store.update_job(job_id, state=states.FAILED, error=str(exc)[:500])
        raise
    rc = _run(
        app,
        job,
        job_id,
        choice.offers,
        log_path,
        opts,
        terminal=False,
        nodes=choice.nodes,
        rates=choice.tokens_per_s,
    )
    if rc:
        sys.exit(rc)


def detach_spawn(app: App, job_file: str, job_id: str, log_path: Path, opts: Flags) -> int:
    argv = detach.launch_argv(job_file, job_id, opts.keep, opts.passed_on())
    return detach.spawn(argv, app.env, log_path)


def _retry(app: App, job: JobSpec, opts: Flags) -> Retry | None:
    """--retry-until-up: until interrupted; resources.retry: that long from now."""
    if not (opts.retry_until_up or job.resources.retry_s):
        return None
    until = math.inf if opts.retry_until_up else time.time() + (job.resources.retry_s or 0.0)
    first = _seconds(app, "retry_backoff", 15.0)
    return Retry(until=until, first_s=first, max_s=min(300.0, 20 * first))


def _run(
    app: App,
    job: JobSpec,
    job_id: str,
    offers: list[Offer],
    log_path: Path,
    opts: Flags,
    *,
    terminal: bool,
    nodes: dict[str, int] | None = None,
    rates: dict[str, float] | None = None,
) -> int:
    # With --json, stdout carries only the JSON document: the job's output goes to stderr.
    out = sys.stderr.buffer if opts.as_json else None
    sink = JobLog(log_path, terminal=terminal, verbose=opts.verbose, out=out)
    keep = opts.keep
    # With an instance up, a write waits out another process's lock rather than fail.
    store = app.store(lock_wait_s=LIFECYCLE_LOCK_WAIT_S)
    deps = build_deps(store=store, registry=app.registry, sink=sink)
    try:
        with teardown_on_signals() as signals:
            options = LaunchOptions(
                keep=keep,
                grace_s=_seconds(app, "deadline_grace", 300),
                on_teardown=signals.shield,
                retry=_retry(app, job, opts),
                default_deadline_s=_seconds(app, "default_deadline", DEFAULT_DEADLINE_S),
                collect_grace_s=_seconds(app, "collect_grace", COLLECT_GRACE_S),
                max_preemptions=max_preemptions(app),
                tokens_per_s=rates or {},
                node_counts=nodes or {},
            )
            # Several nodes, or a range the planner chose within: a MultiNodeRun.
            kind = MultiNodeRun if job.max_nodes > 1 else JobRun
            run = kind(deps, job_id, job, offers, options)
            signals.first = run.interrupt
            rc = run.execute()
        _maybe_reaper(app, job, job_id, keep, log_path)
        return rc
    except OutputsNotCollected as exc:
        if exc.until is not None:  # the kept instance is torn down when the grace ends
            grace = max(1.0, exc.until - time.time())
            detach.spawn(detach.reaper_argv(job_id, grace, exc.until), app.env, log_path)
        raise
    except BaseException:
        _maybe_reaper(app, job, job_id, keep, log_path)
        raise
    finally:
        sink.close()


def _seconds(app: App, key: str, default: float) -> float:
    """A ``[launch]`` setting in seconds: deadline_grace (past max_runtime before the
    instance-side deadline), retry_backoff (the first wait between rounds of
    --retry-until-up), default_deadline (the instance-side deadline of a job without
    max_runtime), collect_grace (how long an instance holding uncollected outputs is
    kept); ssh_timeout (how long a new instance may take to answer SSH) is read by
    build_deps."""
    return app.config.seconds("launch", key, default)


def max_preemptions(app: App) -> int:
    """``[launch] max_preemptions`` (a job's limits.max_preemptions wins over it)."""
    value = app.config.section("launch").get("max_preemptions", MAX_PREEMPTIONS)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{app.config.source}: launch.max_preemptions: expected a count >= 0")
    return value


def _maybe_reaper(app: App, job: JobSpec, job_id: str, keep: bool, log_path: Path) -> None:
    idle = job.limits.idle_timeout_s
    if not (keep and idle):
        return
    store = app.store()
    if store.job(job_id).state == states.KEPT:
        detach.spawn(detach.reaper_argv(job_id, idle), app.env, log_path)
