"""Starter jobs shipped inside the package (cloudgpu/templates), copied out by
`cloudgpu init` and found by name by `cloudgpu launch quickstart`.

The files are read through importlib.resources, so they work from a wheel install with
no checkout. Copying never overwrites a file unless asked, never writes through a
symlink it did not create, and checks every destination before writing the first one,
so a refused copy leaves nothing half-written. Knows nothing of jobs' contents.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from cloudgpu.errors import ConfigError


@dataclass(frozen=True)
class Template:
    name: str
    summary: str
    # (path inside cloudgpu.templates, path written under the destination); a folder
    # is copied whole.
    files: tuple[tuple[str, str], ...]
    job: str | None  # the job file it writes, if it is a job
    next_step: str  # what to run next; {dir} is the destination folder with a slash, or ""

    def next_for(self, dest: Path) -> str:
        return self.next_step.format(dir="" if str(dest) in ("", ".") else f"{dest}/")


def _same(*paths: str) -> tuple[tuple[str, str], ...]:
    return tuple((p, p) for p in paths)


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            "quickstart",
            "a tiny job on this machine: no GPU, no cloud account",
            _same("quickstart.yaml", "quickstart-data"),
            "quickstart.yaml",
            "cloudgpu launch {dir}quickstart.yaml --yes",
        ),
        Template(
            "finetune",
            "full fine-tune of an 8B model on 8x A100-80GB, spot, with checkpoints",
            _same("finetune.yaml", "finetune-code", "finetune-data"),
            "finetune.yaml",
            "cloudgpu plan {dir}finetune.yaml --all-providers  # its cost on every cloud",
        ),
        Template(
            "batch-inference",
            "vLLM batch generation on the cheapest 24 GB+ spot GPU, restartable",
            _same("batch-inference.yaml", "batch-inference-code", "batch-inference-data"),
            "batch-inference.yaml",
            "cloudgpu plan {dir}batch-inference.yaml --all-providers",
        ),
        Template(
            "github-runner",
            "GitHub Actions workflows running tests on an ephemeral GPU runner",
            (
                ("github/workflows/gpu-tests.yml", ".github/workflows/gpu-tests.yml"),
                ("github/workflows/gpu-runner-gc.yml", ".github/workflows/gpu-runner-gc.yml"),
                ("github/action.yml", ".github/actions/cloudgpu-runner/action.yml"),
            ),
            None,
            "edit {dir}.github/workflows/gpu-tests.yml (repository, GPU, cloud credentials)",
        ),
    )
}


def get_template(name: str) -> Template:
    key = name.removesuffix(".yaml").removesuffix(".yml")
    if key not in TEMPLATES:
        raise ConfigError(
            f"unknown template {name!r}: expected one of {', '.join(TEMPLATES)}",
            hint="`cloudgpu init --list` describes each",
        )
    return TEMPLATES[key]


def template_name(arg: str) -> str | None:
    """The template a command-line word names (``quickstart`` or ``quickstart.yaml``)."""
    key = arg.removesuffix(".yaml").removesuffix(".yml")
    return key if key in TEMPLATES and "/" not in arg else None


def _root() -> Traversable:
    return resources.files("cloudgpu.templates")


def _walk(node: Traversable, rel: str) -> Iterator[tuple[Traversable, str]]:
    if node.is_file():
        yield node, rel
        return
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name == "__pycache__" or child.name.startswith("."):
            continue
        yield from _walk(child, f"{rel}/{child.name}")


def template_files(t: Template) -> list[tuple[Traversable, str]]:
    """Every file the template writes: (source, destination relative path)."""
    out: list[tuple[Traversable, str]] = []
    for src, dst in t.files:
        node = _root().joinpath(*src.split("/"))
        if not (node.is_file() or node.is_dir()):
            raise ConfigError(f"template {t.name}: {src} is missing from this installation")
        out += list(_walk(node, dst))
    return out


def job_path(t: Template) -> Traversable:
    """The template's job file inside the installed package (read-only)."""
    if t.job is None:
        raise ConfigError(
            f"template {t.name} is not a job file", hint=f"`cloudgpu init {t.name}` writes it"
        )
    return _root().joinpath(t.job)


def _check_target(dest: Path, rel: str, force: bool) -> str | None:
    """Why ``dest/rel`` cannot be written, or None."""
    path = dest
    for part in Path(rel).parts[:-1]:
        path = path / part
        if path.is_symlink():
            return f"{path} is a symlink"
        if path.exists() and not path.is_dir():
            return f"{path} exists and is not a folder"
    target = dest / rel
    if target.is_symlink():
        return f"{target} is a symlink"
    if target.exists():
        if not target.is_file():
            return f"{target} exists and is not a regular file"
        if not force:
            return f"{target} exists"
    return None


def copy_template(t: Template, dest: Path, *, force: bool = False) -> list[Path]:
    """Write the template's files under ``dest``; returns the files written."""
    files = template_files(t)
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise ConfigError(f"{dest}: expected a folder")
    problems = [p for _, rel in files if (p := _check_target(dest, rel, force))]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(
            f"init: {problems[0]}{more}; nothing was written",
            hint="--force overwrites existing regular files" if not force else None,
        )
    written: list[Path] = []
    for src, rel in files:
        target = dest / rel
        try:
            _write(src.read_bytes(), target)
        except OSError as exc:  # a folder that cannot be made or written (/proc, full disk)
            done = f"; {len(written)} of {len(files)} files were written" if written else ""
            raise ConfigError(
                f"init: cannot write {exc.filename or target}: {exc.strerror or exc}{done}",
                hint="choose a folder you can write to",
            ) from None
        written.append(target)
    return written


def _write(data: bytes, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o755 if data.startswith(b"#!") else 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def job_file_for(arg: str, cwd: Path) -> tuple[str, Template | None]:
    """What a job-file argument means: the file itself when it exists; else, for a
    template name, ``./<template>.yaml`` when present, or the template's packaged file
    (read-only) with the Template so the caller can decide to copy it out."""
    if Path(arg).exists():
        return arg, None
    name = template_name(arg)
    if name is None:
        return arg, None
    t = TEMPLATES[name]
    if t.job is None:
        return arg, None
    local = cwd / t.job
    if local.exists():
        return str(local), None
    return str(job_path(t)), t
