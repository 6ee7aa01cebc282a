"""The `cloudgpu` command line: a thin click group whose subcommands load lazily.

Each command group lives in its own module (listed in COMMANDS) and is imported only
when invoked, so `cloudgpu --help` stays fast. Library exceptions become one line plus a
hint here, in one place (:func:`main`), never a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from cloudgpu import __version__
from cloudgpu.cli.style import BAD, WARN, color_enabled, paint
from cloudgpu.errors import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CloudGPUError,
    environment_error,
    redact,
)

MAX_MESSAGE = 1000  # characters of an error line: values are cut, never echoed whole

# name -> (module, attribute, one-line help shown by --help without importing the module)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "init": ("cloudgpu.cli.init", "init", "Copy a starter job and its data here."),
    "offers": ("cloudgpu.cli.offers", "offers", "Compare GPU offers across providers."),
    "gpus": ("cloudgpu.cli.gpus", "gpus", "GPU specs with the cheapest price of each."),
    "catalog": ("cloudgpu.cli.catalog", "catalog", "Refresh and inspect the offer catalog."),
    "check": ("cloudgpu.cli.check", "check", "Which providers are enabled, and why."),
    "schema": ("cloudgpu.cli.jobspec", "schema", "Print the JSON Schema of job.yaml."),
    "plan": ("cloudgpu.cli.plan", "plan", "Rank the machines that fit a job."),
    "estimate": (
        "cloudgpu.cli.estimate",
        "estimate",
        "Size and cost a workload without a job file.",
    ),
    "launch": ("cloudgpu.cli.launch", "launch", "Plan, provision, run a job and tear down."),
    "status": ("cloudgpu.cli.jobs", "status", "Jobs and their instances."),
    "logs": ("cloudgpu.cli.jobs", "logs", "Show or follow a job's log."),
    "down": ("cloudgpu.cli.down", "down", "Tear down a job, all jobs, or orphans."),
    "ssh": ("cloudgpu.cli.jobs", "ssh", "Open a shell on a job's instance."),
    "exec": ("cloudgpu.cli.jobs", "exec_", "Run a command on a job's instance."),
    "completion": ("cloudgpu.cli.completion", "completion", "Shell completion: bash, zsh, fish."),
    "buy-vs-rent": ("cloudgpu.cli.buyrent", "buy_vs_rent", "When owning GPUs beats renting."),
    "report": ("cloudgpu.cli.report", "report", "Cost reports: HTML, Markdown, CSV, JSON."),
    "runner": ("cloudgpu.cli.runner", "runner", "Ephemeral GitHub Actions GPU runners."),
    "data": ("cloudgpu.cli.data", "data", "List data sources; probe whether GPUs would starve."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        try:
            module = importlib.import_module(spec[0])
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("cloudgpu"):
                return None  # command not built yet
            raise
        cmd: click.Command = getattr(module, spec[1])
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text from COMMANDS so --help imports no command module.
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="cloudgpu")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run GPU work on the cheapest machine that truly fits it.

    Offers come from a bundled, dated price snapshot (refresh with
    `cloudgpu catalog refresh`). Files live under CLOUDGPU_HOME when set. Colour follows
    NO_COLOR / CLICOLOR_FORCE and is off when the output is not a terminal.
    """
    if color_enabled():
        ctx.color = True  # also when forced onto a pipe (CLICOLOR_FORCE)


def _fail(message: str, hint: str | None = None) -> None:
    """The one-line error (and hint) every failure ends with, on stderr."""
    message = " ".join(message.split())
    if len(message) > MAX_MESSAGE:
        message = f"{message[: MAX_MESSAGE - 30]}... ({len(message):,} characters)"
    color = color_enabled(sys.stderr)
    click.echo(f"{paint('error:', BAD, err=True, bold=True)} {message}", err=True, color=color)
    if hint:
        click.echo(f"{paint('hint:', WARN, err=True)} {hint}", err=True, color=color)


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the console script; maps errors to one line and an exit status."""
    try:
        return cli.main(args=argv, prog_name="cloudgpu", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "cloudgpu"
        _fail(exc.format_message(), f"see `{where} --help`")
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        _fail(exc.format_message())
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except CloudGPUError as exc:
        _fail(str(exc), exc.hint)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:  # a bug (exit 3): still one line, traceback only on request
        if os.environ.get("CLOUDGPU_DEBUG"):
            raise
        mapped = environment_error(exc)
        if mapped is not None:
            _fail(str(mapped), mapped.hint)
            sys.exit(mapped.exit_code)
        click.echo(f"internal error: {type(exc).__name__}: {redact(str(exc))}", err=True)
        click.echo("hint: rerun with CLOUDGPU_DEBUG=1 for a traceback and report it", err=True)
        sys.exit(EXIT_ERROR)
