"""Colour on the terminal, only where it helps and only where it is wanted.

Colour is off when NO_COLOR is set to anything (no-color.org), when TERM is "dumb", and
when the stream is not a terminal (a pipe, a file, CI logs); CLICOLOR_FORCE or
FORCE_COLOR turn it on anyway. Decided here once, for every command: the rest of the CLI
calls :func:`paint` and never writes an escape sequence itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

import click

# What a word means, one colour each: state of a job or provider, severity of a line.
GOOD, BAD, WARN, DIM = "green", "red", "yellow", "bright_black"
_STATES = {
    "succeeded": GOOD,
    "enabled": GOOD,
    "running": WARN,
    "provisioning": WARN,
    "staging": WARN,
    "setup": WARN,
    "collecting": WARN,
    "kept": WARN,
    "failed": BAD,
    "interrupted": BAD,
    "stopped": BAD,
    "disabled": DIM,
}


def color_enabled(stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("NO_COLOR"):
        return False
    if env.get("CLICOLOR_FORCE", "0") not in ("", "0") or env.get("FORCE_COLOR"):
        return True
    if env.get("TERM") == "dumb":
        return False
    stream = stream or sys.stdout
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, fg: str | None, *, err: bool = False, bold: bool = False) -> str:
    """``text`` in colour ``fg`` when colour is enabled for stdout (or stderr)."""
    if fg is None or not color_enabled(sys.stderr if err else sys.stdout):
        return text
    return click.style(text, fg=fg, bold=bold)


def state(text: str, *, width: int = 0, err: bool = False) -> str:
    """A state word padded to ``width`` and coloured by what it means (padding first,
    so columns still line up when escape codes are added)."""
    padded = f"{text:<{width}}" if width else text
    return paint(padded, _STATES.get(text.strip()), err=err)
