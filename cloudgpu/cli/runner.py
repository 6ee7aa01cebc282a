"""`cloudgpu runner start | stop | gc | serve`: single-use GitHub Actions GPU runners.

Thin: parse, build the injected parts (GitHub client, lifecycle deps, offer ranking),
call cloudgpu.runners, print. The GitHub token comes from $GITHUB_TOKEN (or the variable
named by ``[runner] token_env`` in config.toml) and is never printed.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from cloudgpu.catalog.offer import Offer, describe_offer
from cloudgpu.cli.context import App, get_app
from cloudgpu.cli.params import PRICE, Duration
from cloudgpu.cli.plan import offer_json
from cloudgpu.cli.sources import choose, startup_history
from cloudgpu.errors import ConfigError
from cloudgpu.lifecycle.deps import build_deps
from cloudgpu.lifecycle.output import JobLog
from cloudgpu.runners.github import GitHubClient
from cloudgpu.runners.naming import repo_owner_tag
from cloudgpu.runners.orchestrator import (
    RunnerRequest,
    Runners,
    RunnerSource,
    Swept,
    plan_runner,
)
from cloudgpu.runners.pools import Pool, load_serve_config
from cloudgpu.runners.serve import RunnerService, WebhookServer, parse_listen
from cloudgpu.runners.webhook import WorkflowJobEvent
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import Store

RUNNER_TIME = Duration(30 * 86400.0)  # a runner lives hours; a month is surely a typo


def _settings(app: App) -> dict[str, object]:
    return app.config.section("runner")


def github_client(app: App) -> GitHubClient:
    cfg = _settings(app)
    token_env = str(cfg.get("token_env", "GITHUB_TOKEN"))
    base = str(app.env.get("GITHUB_API_URL") or cfg.get("api_url") or "https://api.github.com")
    return GitHubClient(app.env.get(token_env, ""), base_url=base)


def make_runners(app: App, repo: str, store: Store | None = None) -> Runners:
    cfg = _settings(app)
    store = store or app.store()
    app.paths.ensure()
    sink = JobLog(app.paths.logs_dir / f"runner-{repo_owner_tag(repo)}.log", terminal=True)
    deps = build_deps(store=store, registry=app.registry, sink=sink, owner=repo_owner_tag(repo))
    history = startup_history(app)
    source = RunnerSource(
        url=_opt(cfg.get("runner_url")),
        sha256=_opt(cfg.get("runner_sha256")),
        version=_opt(cfg.get("runner_version")),
    )
    return Runners(
        deps=deps,
        github=github_client(app),
        offers_for=offers_for(app),
        providers=app.registry.enabled,
        boot_estimate_s=history.startup_s,
        source=source,
        online_timeout_s=app.config.seconds("runner", "online_timeout_s", 600.0),
        boot_grace_s=app.config.seconds("runner", "boot_grace_s", 900.0),
    )


def offers_for(app: App) -> Callable[[JobSpec], list[Offer]]:
    """A runner's offers through the same gather + plan path as `plan` and `launch`."""
    return lambda job: choose(app, job).require()


def _opt(value: object) -> str | None:
    return str(value) if value else None


def _print(swept: Swept) -> None:
    for line in swept.lines:
        click.echo(line)
    for line in swept.failures:
        click.echo(f"FAILED: {line}", err=True)
    if swept.failures:
        raise ConfigError(
            f"{len(swept.failures)} resource(s) could not be removed",
            hint="run `cloudgpu runner gc` again; it finds them by tag",
        )


@click.group("runner")
def runner() -> None:
    """Ephemeral, single-use GitHub Actions runners on the cheapest fitting GPU."""


@runner.command("start")
@click.option("--repo", required=True, help="OWNER/NAME")
@click.option("--gpu", default="any", show_default=True, help="e.g. A100:1, L4, 24GB+")
@click.option("--spot", is_flag=True, help="Use spot/preemptible capacity.")
@click.option(
    "--max-price",
    type=PRICE,
    default=None,
    help="USD per hour, whole instance.",
)
@click.option(
    "--ttl",
    type=RUNNER_TIME,
    default="3h",
    show_default=True,
    help="Hard lifetime of the instance.",
)
@click.option(
    "--idle-timeout",
    type=RUNNER_TIME,
    default="10m",
    show_default=True,
    help="Power off with no job.",
)
@click.option("--run-tag", default=None, help="Unique per run (default: GITHUB_RUN_ID-ATTEMPT).")
@click.option("--labels", default="", help="Extra comma-separated runner labels.")
@click.option("--providers", default="", help="Comma-separated providers to consider.")
@click.option("--allow-public", is_flag=True, help="Allow a public repository (read the docs).")
@click.option("--github-output", is_flag=True, help="Write label/runner-id/instance-id outputs.")
@click.option("--dry-run", is_flag=True, help="Show the offers it would try, then stop.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: those offers as JSON.")
def start(
    repo: str,
    gpu: str,
    spot: bool,
    max_price: float | None,
    ttl: float,
    idle_timeout: float,
    run_tag: str | None,
    labels: str,
    providers: str,
    allow_public: bool,
    github_output: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Start a single-use runner and wait until GitHub reports it online."""
    app = get_app()
    if as_json and not dry_run:
        raise click.UsageError("--json goes with --dry-run")
    tag = run_tag or (_default_run_tag(app) if not dry_run else "dry-run")
    req = RunnerRequest(
        repo=repo,
        run_tag=tag,
        gpu=gpu,
        spot=spot,
        max_price=max_price,
        ttl_s=ttl,
        idle_timeout_s=idle_timeout,
        labels=tuple(x.strip() for x in labels.split(",") if x.strip()),
        providers=tuple(x.strip() for x in providers.split(",") if x.strip()),
        allow_public=allow_public,
    )
    if dry_run:
        _dry_run(app, req, as_json)
        return
    started = make_runners(app, repo).start(req)
    click.echo(f"runner {started.label} online on {started.provider} {started.instance_id}")
    click.echo(
        f"  runs-on: {started.label}    stop: cloudgpu runner stop --repo {repo} --run-tag {tag}"
    )
    if github_output:
        out = app.env.get("GITHUB_OUTPUT")
        if not out:
            raise ConfigError("--github-output: $GITHUB_OUTPUT is not set (not in Actions?)")
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(
                f"label={started.label}\nrunner-id={started.runner_id}\n"
                f"instance-id={started.instance_id}\n"
            )


def _dry_run(app: App, req: RunnerRequest, as_json: bool) -> None:
    """What `start` would choose, through the same checks, without GitHub or a provider."""
    _, _, offers = plan_runner(req, offers_for(app), startup_history(app).startup_s)
    if as_json:
        click.echo(json.dumps([offer_json(o) for o in offers], indent=2))
        return
    click.echo(f"runner for {req.repo}: {len(offers)} offer(s) fit; best first:")
    for i, offer in enumerate(offers[:5], 1):
        click.echo(f"  {i}. {describe_offer(offer)}{'   <- start' if i == 1 else ''}")
    click.echo("dry run: nothing started")


def _default_run_tag(app: App) -> str:
    run_id = app.env.get("GITHUB_RUN_ID")
    if run_id:
        return f"{run_id}-{app.env.get('GITHUB_RUN_ATTEMPT', '1')}"
    tag = uuid.uuid4().hex[:12]
    click.echo(f"run tag: {tag}", err=True)
    return tag


@runner.command("stop")
@click.option("--repo", required=True, help="OWNER/NAME")
@click.option("--run-tag", default=None, help="The run tag given to start.")
def stop(repo: str, run_tag: str | None) -> None:
    """Remove the run's runner from GitHub and terminate its instance(s), found by tag."""
    app = get_app()
    tag = run_tag or app.env.get("GITHUB_RUN_ID")
    if not tag:
        raise ConfigError("--run-tag: required outside GitHub Actions")
    if not run_tag:
        tag = f"{tag}-{app.env.get('GITHUB_RUN_ATTEMPT', '1')}"
    _print(make_runners(app, repo).stop(repo, tag))


@runner.command("gc")
@click.option("--repo", required=True, help="OWNER/NAME")
def gc(repo: str) -> None:
    """Sweep expired or orphaned runner instances and offline runners without instances."""
    app = get_app()
    swept = make_runners(app, repo).gc(repo)
    if not swept.lines and not swept.failures:
        click.echo("nothing to sweep")
    _print(swept)


@dataclass
class _Dispatch:
    """Connects the webhook service to runner start/stop, one store connection each call
    (SQLite connections are per thread)."""

    app: App
    lock: threading.Lock

    def _runners(self, repo: str) -> Runners:
        return make_runners(self.app, repo, Store.open(self.app.paths.state_db))

    def job_still_queued(self, event: WorkflowJobEvent) -> bool:
        job = github_client(self.app).job(event.repo, event.job_id)
        return job is not None and job.get("status") == "queued"

    def start(self, event: WorkflowJobEvent, pool: Pool) -> None:
        labels = tuple(
            x
            for x in event.labels
            if x.lower() not in {"self-hosted", "linux", "x64", "arm64", "arm", "windows", "macos"}
        )
        req = RunnerRequest(
            repo=event.repo,
            run_tag=f"job-{event.job_id}",
            gpu=pool.gpu,
            spot=pool.spot,
            max_price=pool.max_price,
            ttl_s=pool.ttl_s,
            idle_timeout_s=pool.idle_timeout_s,
            labels=labels,
            providers=pool.providers,
            allow_public=True,
        )
        self._runners(event.repo).start(req)

    def reap(self, event: WorkflowJobEvent) -> None:
        """Remove the runner that ran a completed job, only if this service made it (its
        name and a record in this store): the user's own runners are never touched."""
        runners = self._runners(event.repo)
        if event.runner_name and runners.made_here(event.runner_name):
            runners.stop_job(event.repo, event.runner_name)


@runner.command("serve")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
def serve(config_path: str) -> None:
    """Serve workflow_job webhooks: start a runner per queued job, reap on completion."""
    app = get_app()
    config = load_serve_config(Path(config_path))
    secret = app.env.get(config.secret_env, "")
    if not secret:
        raise ConfigError(f"{config_path}: webhook secret: ${config.secret_env} is not set")
    github_client(app)  # fail now, not per delivery, when the token is missing
    host, port = parse_listen(config.listen)
    service = RunnerService(config, secret.encode(), _Dispatch(app, threading.Lock()))
    server = WebhookServer((host, port), service)
    click.echo(
        f"listening on {server.url}/webhook ({len(config.pools)} pool(s), "
        f"at most {config.max_concurrency} runners at once)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        service.close()
        os.environ.pop(config.secret_env, None)
