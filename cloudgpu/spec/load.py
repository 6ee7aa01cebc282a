"""Load and validate job.yaml into a JobSpec; every error names file, line, key and form.

The file is composed into PyYAML's node tree (not loaded into plain dicts) so each value
still knows its line. Allowed keys come from cloudgpu.spec.schema. This module reads the
job file and checks that local data paths exist; it contacts no provider or cloud.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from cloudgpu.data.uri import parse as parse_uri
from cloudgpu.errors import SpecError
from cloudgpu.spec import schema
from cloudgpu.spec.model import DataItem, JobSpec, Limits, OutputItem, Resources
from cloudgpu.spec.units import (
    parse_duration_s,
    parse_gpu,
    parse_min_count,
    parse_size_gb,
)

T = TypeVar("T")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Node = yaml.Node


class _Doc:
    """One job file being validated: knows the file name and builds located errors."""

    def __init__(self, file: str, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader

    def err(self, node: Node | None, key: str, message: str, hint: str | None = None) -> SpecError:
        line = node.start_mark.line + 1 if node is not None else None
        return SpecError(message, file=self.file, line=line, key=key or None, hint=hint)

    def scalar(self, node: Node, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
            raise self.err(node, key, f"expected a single value, got {kind}")
        return self.loader.construct_object(node, deep=True)

    def text(self, node: Node, key: str) -> str:
        value = self.scalar(node, key)
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise self.err(node, key, f"expected text, got {value!r}")
        return str(value)

    def command(self, node: Node, key: str) -> str:
        """A shell command: the text as written (``run: true`` is the command ``true``)."""
        if not isinstance(node, yaml.ScalarNode):
            raise self.err(node, key, "expected a command (text; use | for several lines)")
        return str(node.value)

    def mapping(
        self, node: Node, key: str, allowed: Mapping[str, Any] | None
    ) -> dict[str, tuple[Node, Node]]:
        """``{key: (key_node, value_node)}``; unknown keys fail with a did-you-mean."""
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, key, "expected a mapping of key: value lines")
        out: dict[str, tuple[Node, Node]] = {}
        for knode, vnode in node.value:
            name = str(self.scalar(knode, key))
            full = f"{key}.{name}" if key else name
            if name in out:
                raise self.err(knode, full, "duplicate key (each key may appear once)")
            if allowed is not None and name not in allowed:
                raise self._unknown(knode, full, name, allowed)
            out[name] = (knode, vnode)
        return out

    def _unknown(self, knode: Node, full: str, name: str, allowed: Mapping[str, Any]) -> SpecError:
        close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
        guess = f"did you mean '{close[0]}'? " if close else ""
        return self.err(
            knode, full, f"unknown key; {guess}expected one of: {', '.join(sorted(allowed))}"
        )

    def sequence(self, node: Node, key: str) -> list[Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.err(node, key, "expected a list (lines starting with '- ')")
        return list(node.value)

    def parsed(self, node: Node, key: str, parse: Callable[[Any], T]) -> T:
        value = self.scalar(node, key)
        try:
            return parse(value)
        except ValueError as exc:
            raise self.err(node, key, str(exc)) from None


def load_job(path: str | os.PathLike[str]) -> JobSpec:
    """Read and validate a job file; raise SpecError (one line, located) on any problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            "job file not found",
            file=str(p),
            hint="`cloudgpu init` writes a starter job here (`cloudgpu init --list` shows "
            "them); `cloudgpu launch quickstart` runs the smallest one",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read job file: {exc}", file=str(p)) from None
    return parse_job(text, file=str(p), base_dir=str(p.resolve().parent))


def parse_job(text: str, *, file: str = "<job>", base_dir: str = ".") -> JobSpec:
    loader = yaml.SafeLoader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            what = exc.problem or exc.context or "syntax error"
            raise SpecError(f"invalid YAML: {what}", file=file, line=line) from None
        except yaml.YAMLError as exc:
            raise SpecError(f"invalid YAML: {exc}", file=file) from None
        if root is None:
            raise SpecError("the job file is empty; expected at least name: and run:", file=file)
        return _job(_Doc(file, loader), root, base_dir)
    finally:
        loader.dispose()


def _job(doc: _Doc, root: Node, base_dir: str) -> JobSpec:
    top = doc.mapping(root, "", schema.TOP)
    for req in schema.REQUIRED:
        if req not in top:
            raise doc.err(root, req, f"missing required key '{req}'")
    name = doc.text(top["name"][1], "name")
    if not _NAME_RE.match(name):
        raise doc.err(top["name"][1], "name", "expected lowercase letters, digits and '-' (max 63)")
    run = doc.command(top["run"][1], "run")
    if not run.strip():
        raise doc.err(top["run"][1], "run", "expected a command, got an empty string")
    num_nodes = _num_nodes(doc, top)

    def opt(key: str, fn: Callable[[_Doc, Node], Any], default: Any) -> Any:
        return fn(doc, top[key][1]) if key in top else default

    return JobSpec(
        name=name,
        resources=opt("resources", _resources, Resources()),
        workload=opt("workload", _workload, None),
        data=opt("data", lambda d, n: _data(d, n, base_dir), ()),
        setup=opt("setup", lambda d, n: d.command(n, "setup"), ""),
        run=run,
        outputs=opt("outputs", _outputs, ()),
        env=opt("env", _env, {}),
        limits=opt("limits", _limits, Limits()),
        checkpoint=opt("checkpoint", lambda d, n: _abs_path(d, n, "checkpoint"), None),
        num_nodes=num_nodes,
        source=doc.file,
        base_dir=base_dir,
    )


def _num_nodes(doc: _Doc, top: dict[str, tuple[Node, Node]]) -> int:
    if "num_nodes" not in top:
        return 1
    node = top["num_nodes"][1]
    value = doc.scalar(node, "num_nodes")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise doc.err(node, "num_nodes", f"expected a whole number >= 1, got {value!r}")
    if value > 1:
        raise doc.err(
            node,
            "num_nodes",
            f"multi-node jobs ({value} nodes) are not supported yet; expected num_nodes: 1",
            hint="run on one node with more GPUs, e.g. gpu: H100:8",
        )
    return value


def _resources(doc: _Doc, node: Node) -> Resources:
    m = doc.mapping(node, "resources", schema.RESOURCES)
    kw: dict[str, Any] = {}
    if "gpu" in m:
        kw["gpu"] = doc.parsed(m["gpu"][1], "resources.gpu", parse_gpu)
    if "cpus" in m:
        kw["cpus"] = doc.parsed(m["cpus"][1], "resources.cpus", parse_min_count)
    for key, attr in (("memory", "memory_gb"), ("local_nvme", "local_nvme_gb")):
        if key in m:
            kw[attr] = doc.parsed(m[key][1], f"resources.{key}", parse_size_gb)
    if "disk" in m:
        kw["disk_gb"] = max(1, round(doc.parsed(m["disk"][1], "resources.disk", parse_size_gb)))
    if "spot" in m:
        kw["spot"] = _spot(doc, m["spot"][1])
    if "max_price" in m:
        kw["max_price"] = _positive(doc, m["max_price"][1], "resources.max_price", "USD/hour")
    for key in ("providers", "regions"):
        if key in m:
            kw[key] = tuple(_str_list(doc, m[key][1], f"resources.{key}"))
    if "image" in m:
        kw["image"] = doc.text(m["image"][1], "resources.image")
    if "retry" in m:
        kw["retry_s"] = doc.parsed(m["retry"][1], "resources.retry", parse_duration_s)
    return Resources(**kw)


def _spot(doc: _Doc, node: Node) -> str:
    value = doc.scalar(node, "resources.spot")
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str) and value.lower() in ("auto", "true", "false"):
        return value.lower()
    raise doc.err(node, "resources.spot", f"expected true, false or auto, got {value!r}")


def _positive(doc: _Doc, node: Node, key: str, unit: str) -> float:
    value = doc.scalar(node, key)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise doc.err(node, key, f"expected a positive number ({unit}), got {value!r}")
    return float(value)


def _str_list(doc: _Doc, node: Node, key: str) -> list[str]:
    if isinstance(node, yaml.ScalarNode):  # `providers: aws` is read as [aws]
        return [doc.text(node, key)]
    return [doc.text(item, key) for item in doc.sequence(node, key)]


def _workload(doc: _Doc, node: Node) -> dict[str, Any]:
    # The planner owns the vocabulary of this block; here it only has to be flat.
    m = doc.mapping(node, "workload", None)
    return {k: doc.scalar(v, f"workload.{k}") for k, (_, v) in m.items()}


def _copies(
    doc: _Doc, node: Node, key: str, allowed: Mapping[str, Any]
) -> list[tuple[dict[str, tuple[Node, Node]], str, str]]:
    out = []
    for i, item in enumerate(doc.sequence(node, key)):
        ikey = f"{key}[{i}]"
        m = doc.mapping(item, ikey, allowed)
        for req in schema.COPY_KEYS:
            if req not in m:
                raise doc.err(item, f"{ikey}.{req}", f"missing required key '{req}'")
        out.append((m, doc.text(m["src"][1], f"{ikey}.src"), doc.text(m["dst"][1], f"{ikey}.dst")))
    return out


def _data(doc: _Doc, node: Node, base_dir: str) -> tuple[DataItem, ...]:
    items = []
    for i, (m, src, dst) in enumerate(_copies(doc, node, "data", schema.DATA_ITEM)):
        key = f"data[{i}]"
        src_node = m["src"][1]
        if "://" in src:
            try:
                parse_uri(src)
            except ValueError as exc:
                raise doc.err(src_node, f"{key}.src", str(exc)) from None
        else:
            local = Path(base_dir, os.path.expanduser(src))
            if not local.exists():
                raise doc.err(
                    src_node,
                    f"{key}.src",
                    f"local path does not exist: {local}",
                    hint="paths are relative to the job file's directory",
                )
        items.append(
            DataItem(
                src=src,
                dst=_abs_text(doc, m["dst"][1], dst, f"{key}.dst"),
                exclude=tuple(_str_list(doc, m["exclude"][1], f"{key}.exclude"))
                if "exclude" in m
                else (),
                pack=_flag(doc, m["pack"][1], f"{key}.pack") if "pack" in m else False,
                workers=_workers(doc, m["workers"][1], f"{key}.workers")
                if "workers" in m
                else None,
            )
        )
        if items[-1].pack and "://" in src:
            raise doc.err(m["pack"][1], f"{key}.pack", "pack: true is for local directories only")
    return tuple(items)


def _flag(doc: _Doc, node: Node, key: str) -> bool:
    value = doc.scalar(node, key)
    if not isinstance(value, bool):
        raise doc.err(node, key, f"expected true or false, got {value!r}")
    return value


def _workers(doc: _Doc, node: Node, key: str) -> int:
    value = doc.scalar(node, key)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 256:
        raise doc.err(node, key, f"expected a whole number from 1 to 256, got {value!r}")
    return value


def _outputs(doc: _Doc, node: Node) -> tuple[OutputItem, ...]:
    out = []
    copy_keys = dict.fromkeys(schema.COPY_KEYS)
    for i, (m, src, dst) in enumerate(_copies(doc, node, "outputs", copy_keys)):
        if "://" in dst:
            raise doc.err(
                m["dst"][1],
                f"outputs[{i}].dst",
                "object-store outputs are not supported yet; expected a local path",
            )
        out.append(OutputItem(src=_abs_text(doc, m["src"][1], src, f"outputs[{i}].src"), dst=dst))
    return tuple(out)


def _abs_path(doc: _Doc, node: Node, key: str) -> str:
    return _abs_text(doc, node, doc.text(node, key), key)


def _abs_text(doc: _Doc, node: Node, value: str, key: str) -> str:
    if not value.startswith("/") or "/../" in value + "/":
        raise doc.err(
            node, key, f"expected an absolute path on the instance like /nvme/data, got {value!r}"
        )
    return value.rstrip("/") or "/"


def _env(doc: _Doc, node: Node) -> dict[str, str]:
    out = {}
    for name, (knode, vnode) in doc.mapping(node, "env", None).items():
        if not _ENV_RE.match(name):
            raise doc.err(knode, f"env.{name}", "expected a variable name like WANDB_MODE")
        value = doc.scalar(vnode, f"env.{name}")
        if value is None or isinstance(value, list | dict):
            raise doc.err(vnode, f"env.{name}", "expected a text, number or true/false value")
        out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _limits(doc: _Doc, node: Node) -> Limits:
    m = doc.mapping(node, "limits", schema.LIMITS)
    kw: dict[str, Any] = {}
    for key, attr in (("max_runtime", "max_runtime_s"), ("idle_timeout", "idle_timeout_s")):
        if key in m:
            kw[attr] = doc.parsed(m[key][1], f"limits.{key}", parse_duration_s)
    if "max_cost" in m:
        kw["max_cost"] = _positive(doc, m["max_cost"][1], "limits.max_cost", "USD")
    return Limits(**kw)
