"""Load and validate job.yaml into a JobSpec; every error names file, line, key and form.

The file is composed into PyYAML's node tree (not loaded into plain dicts) so each value
still knows its line, and the tree is walked against the one definition in
cloudgpu.spec.schema. YAML's own features are handled here: merge keys (``<<: *base``)
merge, anchors are shared (never expanded, so an alias bomb costs nothing), tags other
than YAML's core ones are refused, and nesting beyond what the definition allows stops
at the first wrong level. Checks that need the rest of cloudgpu (GPU, provider and model
names) are passed in as :class:`JobChecks`, so `schema --check`, `plan` and `launch`
give one verdict. This module reads the job file and checks that local data paths
exist; it contacts no provider or cloud.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cloudgpu.data import uri
from cloudgpu.errors import CloudGPUError, SpecError
from cloudgpu.spec import schema
from cloudgpu.spec.fields import (
    MAX_ITEMS,
    Block,
    ListOf,
    Node,
    Unchecked,
    Value,
    clip,
    shown,
    unknown_key,
)
from cloudgpu.spec.model import DataItem, JobSpec, Limits, OutputItem, Resources
from cloudgpu.userfile import UnreadableFile, read_user_text

YNode = yaml.Node
_CORE = "tag:yaml.org,2002:"
_ALLOWED_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null", "map", "seq")}
_ALLOWED_TAGS.add(_CORE + "timestamp")  # read as a date, then refused where text is due
_MERGE_TAG = _CORE + "merge"
# libyaml's parser when PyYAML was built with it (its wheels are), else the pure-Python one
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_JOB_BYTES = 16 << 20
MAX_DEPTH = 100


@dataclass(frozen=True)
class JobChecks:
    """What only the rest of cloudgpu knows, passed in so every command checks alike.

    ``gpu`` raises (a CloudGPUError or ValueError naming the closest) for an unknown GPU
    name; ``providers`` are the installed provider names; ``workload`` interprets the
    workload block (the planner's parser) and raises a ConfigError naming the key.
    """

    gpu: Callable[[str], object]
    providers: Collection[str]
    workload: Callable[[Mapping[str, Any]], object]


class _Walk:
    """One job file being validated: knows the file, builds located errors, and remembers
    the node of every key path it visited (for checks made after the walk)."""

    def __init__(self, file: str, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader
        self.nodes: dict[str, YNode] = {}

    def err(
        self,
        node: YNode | None,
        key: str,
        message: str,
        hint: str | None = None,
        *,
        beyond: bool = False,
    ) -> SpecError:
        line = node.start_mark.line + 1 if node is not None else None
        e = SpecError(message, file=self.file, line=line, key=key or None, hint=hint)
        e.beyond_schema = beyond
        return e

    def walk(self, defn: Node, node: YNode, key: str) -> Any:
        self._tag(node, key)
        self.nodes[key] = node
        if isinstance(defn, Block):
            return self._block(defn, node, key)
        if isinstance(defn, ListOf):
            return self._list(defn, node, key)
        return self._value(defn, node, key)

    def _tag(self, node: YNode, key: str) -> None:
        if node.tag not in _ALLOWED_TAGS:
            tag = node.tag.replace(_CORE, "!!")
            raise self.err(
                node, key, f"YAML tag {shown(tag)} is not supported; expected plain YAML values"
            )

    def _value(self, defn: Value, node: YNode, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
            raise self.err(node, key, f"expected a single value, got {kind}")
        if defn.raw:
            if node.tag == _CORE + "null":  # `run:` or `run: ~` states no command
                raise self.err(node, key, "expected a command, got nothing")
            value: Any = node.value
        else:
            try:
                value = self.loader.construct_object(node)
            except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
                raise self.err(node, key, f"not a valid value: {shown(node.value)}") from exc
        try:
            return defn.parse(value)
        except Unchecked as exc:
            raise self.err(node, key, str(exc), beyond=True) from None
        except ValueError as exc:
            raise self.err(node, key, str(exc)) from None

    def _list(self, defn: ListOf, node: YNode, key: str) -> list[Any]:
        if defn.scalar_ok and isinstance(node, yaml.ScalarNode):  # `providers: aws`
            return [self.walk(defn.item, node, key)]
        if not isinstance(node, yaml.SequenceNode):
            raise self.err(node, key, "expected a list (lines starting with '- ')")
        if len(node.value) > MAX_ITEMS:
            raise self.err(
                node, key, f"expected at most {MAX_ITEMS} entries, got {len(node.value)}"
            )
        return [self.walk(defn.item, item, f"{key}[{i}]") for i, item in enumerate(node.value)]

    def _block(self, defn: Block, node: YNode, key: str) -> dict[str, Any]:
        if defn.scalar_key and isinstance(node, yaml.ScalarNode):
            return {defn.scalar_key: self.walk(defn.keys[defn.scalar_key], node, key)}
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, key, "expected a mapping of key: value lines")
        pairs = self._pairs(node, key, frozenset())
        if len(pairs) > MAX_ITEMS:
            raise self.err(node, key, f"expected at most {MAX_ITEMS} keys, got {len(pairs)}")
        wanted: dict[str, tuple[str, YNode, Node]] = {}
        for name, (knode, vnode) in pairs.items():
            full = f"{key}.{name}" if key else name
            if defn.values is not None:
                if defn.key_pattern and not re.match(defn.key_pattern, name):
                    raise self.err(knode, full, f"expected {defn.key_form or 'another key'}")
                wanted[name] = (full, vnode, defn.values)
            elif defn.extensions and name.startswith("x-"):
                continue  # an extension key: a home for anchors, never read
            elif name in defn.keys:
                wanted[name] = (full, vnode, defn.keys[name])
            else:
                raise self._unknown(knode, full, name, defn)
        for req in defn.required:
            if req not in wanted:
                full = f"{key}.{req}" if key else req
                raise self.err(node, full, f"missing required key '{req}'")
        return {name: self.walk(sub, vnode, full) for name, (full, vnode, sub) in wanted.items()}

    def _pairs(self, node: YNode, key: str, seen: frozenset[int]) -> dict[str, tuple[YNode, YNode]]:
        """The mapping's keys with ``<<:`` merges applied (its own keys win)."""
        own: dict[str, tuple[YNode, YNode]] = {}
        merged: dict[str, tuple[YNode, YNode]] = {}
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG:
                for src in self._merge_sources(vnode, key, seen | {id(node)}):
                    for name, pair in self._pairs(src, key, seen | {id(node)}).items():
                        merged.setdefault(name, pair)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                raise self.err(knode, key, "expected a plain key, got a list or mapping as a key")
            self._tag(knode, key)
            name = knode.value
            if name in own:
                full = f"{key}.{name}" if key else name
                raise self.err(
                    knode, clip(full, 80), "duplicate key (each key may appear once)", beyond=True
                )  # JSON (and so the schema) cannot see a repeated key
            own[name] = (knode, vnode)
        return {**merged, **own}

    def _merge_sources(self, vnode: YNode, key: str, seen: frozenset[int]) -> list[YNode]:
        sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
        for src in sources:
            if not isinstance(src, yaml.MappingNode):
                raise self.err(
                    src, key or "<<", "a merge key (<<) takes a mapping or a list of them"
                )
            if id(src) in seen:
                raise self.err(src, key or "<<", "a merge key (<<) refers to its own mapping")
        return list(sources)

    def _unknown(self, knode: YNode, full: str, name: str, defn: Block) -> SpecError:
        return self.err(knode, clip(full, 80), unknown_key(name, list(defn.keys)))


def load_job(path: str | os.PathLike[str], checks: JobChecks | None = None) -> JobSpec:
    """Read and validate a job file; raise SpecError (one line, located) on any problem."""
    p = Path(path)
    try:
        text = read_user_text(p, "job file", MAX_JOB_BYTES)
    except UnreadableFile as exc:
        hint = exc.hint
        if exc.missing:
            hint = (
                "`cloudgpu init` writes a starter job here (`cloudgpu init --list` shows "
                "them); `cloudgpu launch quickstart` runs the smallest one"
            )
        raise SpecError(str(exc), file=str(p), line=exc.line, hint=hint) from None
    return parse_job(text, file=str(p), base_dir=str(p.resolve().parent), checks=checks)


def parse_job(
    text: str, *, file: str = "<job>", base_dir: str = ".", checks: JobChecks | None = None
) -> JobSpec:
    # libyaml (PyYAML's C parser): a 1 MB value or a long file parses in milliseconds,
    # not seconds. Its composer recurses in C, so nesting is bounded first, from events.
    _bound_depth(text, file)
    try:
        loader = _LOADER(text)  # the pure-Python one checks the characters here
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, file) from None
    try:
        walk = _Walk(file, loader)
        try:
            root = _compose(loader, file, text)
            job = _build(walk, walk.walk(schema.JOB, root, ""), file, base_dir)
        except RecursionError:  # a walk deeper than Python allows; the bound above is lower
            raise SpecError(
                f"nested more than {MAX_DEPTH} levels deep; a job file needs a few", file=file
            ) from None
        if checks is not None:
            _verdict(walk, job, checks)
        return job
    finally:
        loader.dispose()


def _bound_depth(text: str, file: str) -> None:
    """Refuse nesting past MAX_DEPTH at the line where it passes (read as events, which
    libyaml makes without recursion). A syntax error is left to the composer to report."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    raise SpecError(
                        f"nested more than {MAX_DEPTH} levels deep; a job file needs a few",
                        file=file,
                        line=None if mark is None else int(mark.line) + 1,
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return


def _reader_error(exc: yaml.reader.ReaderError, text: str, file: str) -> SpecError:
    # libyaml's position counts UTF-8 bytes, the pure-Python reader's characters
    at = max(0, exc.position)
    if _LOADER is yaml.SafeLoader:
        line = text.count("\n", 0, at) + 1
    else:
        line = text.encode("utf-8", "replace").count(b"\n", 0, at) + 1
    char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or " ")
    return SpecError(
        f"invalid YAML: character #x{char:04x} is not allowed in a YAML file", file=file, line=line
    )


def _compose(loader: yaml.SafeLoader, file: str, text: str) -> YNode:
    try:
        root = loader.get_single_node()
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, file) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = exc.problem or exc.context or "syntax error"
        raise SpecError(f"invalid YAML: {clip(str(what))}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {clip(str(exc))}", file=file) from None
    if root is None:
        raise SpecError("the job file is empty; expected at least name: and run:", file=file)
    return root


def _fields(block: Block, parsed: Mapping[str, Any]) -> dict[str, Any]:
    """Parsed values keyed by the model's field names (lists become tuples)."""
    out = {}
    for key, value in parsed.items():
        defn = block.keys[key]
        attr = defn.attr if isinstance(defn, Value) and defn.attr else key
        out[attr] = tuple(value) if isinstance(value, list) else value
    return out


def _build(walk: _Walk, tree: dict[str, Any], file: str, base_dir: str) -> JobSpec:
    data = tuple(
        DataItem(
            d["src"], d["dst"], tuple(d.get("exclude", ())), d.get("pack", False), d.get("workers")
        )
        for d in tree.get("data", ())
    )
    for i, item in enumerate(data):
        if item.pack and _SCHEME.match(item.src):
            raise walk.err(
                walk.nodes[f"data[{i}].pack"],
                f"data[{i}].pack",
                "pack: true is for local directories only",
                beyond=True,
            )
        if not _SCHEME.match(item.src):
            local = os.path.normpath(os.path.join(base_dir, os.path.expanduser(item.src)))
            if not os.path.exists(local):
                raise walk.err(
                    walk.nodes[f"data[{i}].src"],
                    f"data[{i}].src",
                    f"local path does not exist: {clip(local)}",
                    hint="paths are relative to the job file's directory",
                    beyond=True,
                )
    return JobSpec(
        name=tree["name"],
        resources=Resources(**_fields(schema.RESOURCES, tree.get("resources", {}))),
        workload=tree.get("workload"),
        data=data,
        setup=tree.get("setup", ""),
        run=tree["run"],
        outputs=tuple(
            OutputItem(o["src"], o["dst"], bool(o.get("all_nodes", False)))
            for o in tree.get("outputs", ())
        ),
        env=tree.get("env", {}),
        limits=Limits(**_fields(schema.LIMITS, tree.get("limits", {}))),
        **_checkpoint(tree.get("checkpoint")),
        num_nodes=_num_nodes(walk, tree)[0],
        max_nodes=_num_nodes(walk, tree)[1],
        source=file,
        base_dir=base_dir,
    )


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _checkpoint(parsed: Mapping[str, Any] | None) -> dict[str, Any]:
    """``checkpoint: PATH`` or ``{path: PATH, sync_every: 5m, dst: s3://...}`` as the
    model's fields."""
    if not parsed:
        return {}
    out: dict[str, Any] = {"checkpoint": parsed["path"]}
    if "sync_every" in parsed:
        out["checkpoint_every_s"] = parsed["sync_every"]
    if "dst" in parsed:
        out["checkpoint_dst"] = parsed["dst"]
    return out


def _num_nodes(walk: _Walk, tree: dict[str, Any]) -> tuple[int, int]:
    """(fewest, most) nodes: parsed by schema.NUM_NODES as the walk checked it."""
    value = tree.get("num_nodes", 1)
    return value if isinstance(value, tuple) else (int(value), int(value))


def _verdict(walk: _Walk, job: JobSpec, checks: JobChecks) -> None:
    """The checks that need GPU, provider and model tables, located like the others."""
    gpu = job.resources.gpu.name
    if gpu is not None:
        try:
            checks.gpu(gpu)
        except (CloudGPUError, ValueError) as exc:
            hint = exc.hint if isinstance(exc, CloudGPUError) else None
            node = walk.nodes["resources.gpu"]
            raise walk.err(node, "resources.gpu", str(exc), hint, beyond=True) from None
    installed = sorted(checks.providers)
    for i, name in enumerate(job.resources.providers):
        if name not in installed:
            key = f"resources.providers[{i}]"
            node = walk.nodes.get(key) or walk.nodes["resources.providers"]
            close = difflib.get_close_matches(name[:100], installed, n=1, cutoff=0.6)
            guess = f"did you mean '{close[0]}'? " if close else ""
            raise walk.err(
                node,
                key,
                f"unknown provider {shown(name)}; {guess}installed: {', '.join(installed)}",
                beyond=True,
            )
    _provider_sources(walk, job, installed)
    if job.workload is not None:
        try:
            checks.workload(job.workload)
        except CloudGPUError as exc:
            raise _workload_error(walk, exc) from None


def _provider_sources(walk: _Walk, job: JobSpec, installed: list[str]) -> None:
    """``PROVIDER://...`` data is held by that provider (kaggle://OWNER/DATASET): the
    scheme must be an installed provider and the job must run only there, so no paid
    instance starts somewhere that cannot read it."""
    for i, item in enumerate(job.data):
        scheme, sep, _ = item.src.partition("://")
        if not sep or scheme in uri.SCHEMES:
            continue
        key = f"data[{i}].src"
        node = walk.nodes.get(key) or walk.nodes["data"]
        if scheme not in installed:
            forms = ", ".join(s + "://" for s in uri.SCHEMES)
            raise walk.err(
                node,
                key,
                f"{scheme[:40]}:// sources are not supported; expected one of {forms}, "
                "or PROVIDER:// for data a provider holds itself",
                beyond=True,
            )
        if tuple(job.resources.providers) != (scheme,):
            raise walk.err(
                node,
                key,
                f"{scheme}:// data is held by the {scheme} provider: the job can run only "
                f"there; expected resources.providers: [{scheme}]",
                beyond=True,
            )


def _workload_error(walk: _Walk, exc: CloudGPUError) -> SpecError:
    """The planner's message ``workload.KEY: ...`` located at KEY's line."""
    message = str(exc)
    m = re.match(r"^(workload(?:\.[A-Za-z_]+)?):\s*(.*)$", message)
    key, rest = (m.group(1), m.group(2)) if m else ("workload", message)
    node = walk.nodes.get(key) or walk.nodes["workload"]
    return walk.err(node, key, rest, exc.hint, beyond=True)
