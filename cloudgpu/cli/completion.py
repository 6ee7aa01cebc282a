"""`cloudgpu completion bash|zsh|fish`: print the shell's completion script.

The script calls `cloudgpu` back with _CLOUDGPU_COMPLETE set (click's shell completion);
job ids for logs/down/ssh/exec/status come from the local state store only, so a TAB
never waits on a provider.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_CLOUDGPU_COMPLETE"


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL.

    \b
      bash:  echo 'eval "$(cloudgpu completion bash)"' >> ~/.bashrc
      zsh:   echo 'eval "$(cloudgpu completion zsh)"' >> ~/.zshrc
      fish:  cloudgpu completion fish > ~/.config/fish/completions/cloudgpu.fish

    Completes commands, options, choices, file names and job ids (logs, down, ssh,
    exec, status).
    """
    cls = get_completion_class(shell)
    if cls is None:  # click knows every name in SHELLS; keep mypy and old clicks honest
        raise click.UsageError(f"no completion support for {shell} in this click version")
    root = ctx.find_root().command
    click.echo(cls(root, {}, "cloudgpu", COMPLETE_VAR).source())
