"""Malformed job files generated from the templates.

Every key path of every template gets wrong types, and the definition's blocks get
unknown and missing keys; numeric keys get absurd numbers and units; every value gets
YAML tags and alias bombs; files get broken encodings; text keys get huge strings and
path tricks. A case is kept only when it is truly malformed: the generated JSON Schema
rejects it (or it holds what JSON cannot: NaN, infinity), or it is an absurd magnitude
the loader owns (SpecError.beyond_schema). Each case says which key the one-line error
must name (None: a file-level error, which must name the file and its line).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from cloudgpu.spec import json_schema

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
NAMES = ("quickstart", "finetune", "batch-inference")
VALIDATOR = jsonschema.Draft202012Validator(json_schema())
PLACEHOLDER = "@@RAW@@"


@dataclass(frozen=True)
class Case:
    id: str
    text: bytes
    key: str | None  # the key the error must name; None: the file (and line)
    template: str


def template(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((TEMPLATES / f"{name}.yaml").read_text())
    return data


def schema_rejects(doc: Any) -> bool:
    """The JSON Schema's verdict; a document JSON cannot hold (NaN) counts as rejected."""
    try:
        json.dumps(doc, allow_nan=False)
    except (ValueError, TypeError):  # NaN, infinity, bytes (!!binary), dates
        return True
    return not VALIDATOR.is_valid(doc)


def paths(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every key path below ``node`` (``data[0].src`` style) with its value."""
    if isinstance(node, dict):
        for k, v in node.items():
            full = f"{prefix}.{k}" if prefix else str(k)
            yield full, v
            yield from paths(v, full)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            full = f"{prefix}[{i}]"
            yield full, v
            yield from paths(v, full)


def _steps(path: str) -> list[str | int]:
    out: list[str | int] = []
    for part in path.replace("]", "").split("."):
        name, *idx = part.split("[")
        if name:
            out.append(name)
        out += [int(i) for i in idx]
    return out


def replaced(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    new = copy.deepcopy(doc)
    *head, last = _steps(path)
    node: Any = new
    for step in head:
        node = node[step]
    node[last] = value
    return new


def removed(doc: dict[str, Any], path: str) -> dict[str, Any]:
    new = copy.deepcopy(doc)
    *head, last = _steps(path)
    node: Any = new
    for step in head:
        node = node[step]
    del node[last]
    return new


def dump(doc: dict[str, Any], raw: str | None = None) -> bytes:
    text = yaml.dump(
        doc, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True, width=1 << 30
    )
    if raw is not None:
        text = text.replace(f"'{PLACEHOLDER}'", raw).replace(PLACEHOLDER, raw)
    return text.encode("utf-8")


WRONG_TYPES: list[Any] = [
    {"a": 1},
    [1, 2],
    True,
    12345,
    -1,
    0.5,
    None,
    "",
    "   ",
    "x" * 300,
    math.nan,
    math.inf,
]
ABSURD: list[Any] = [
    "99999999d",
    "1" * 400 + "h",
    "1e999GB",
    "-5GB",
    "5XB",
    "0s",
    "10",
    -1,
    0,
    1e30,
    -math.inf,
    math.nan,
    "9" * 400,
]
# Magnitudes inside unit strings: the JSON Schema's patterns accept them, the loader
# refuses them (SpecError.beyond_schema).
BEYOND_SCHEMA = {"99999999d", "1" * 400 + "h", "0s", "9" * 400}
RAW_YAML = [
    "!foo x",
    "!!python/object/apply:os.system ['true']",
    "!!binary aGk=",
    "*bomb",
    "{<<: 3}",
]
PATH_TRICKS = {
    "dst": ["/etc", "/", "/nvme/../etc", "../nvme", "~", "/nvmex", "nvme/x", "/root/.ssh"],
    "src": ["", " ", "s3://", "s3://UPPER_CASE/x", "gs://b", "ftp://host/x", "az://a"],
    "checkpoint": ["/etc/ckpt", "ckpt", "/nvme/../../x"],
}
BOMB = "x-bomb:\n" + "".join(
    f"  a{i}: &{'bomb' if i == 6 else f'a{i}'} [{', '.join([f'*a{i - 1}'] * 9) if i else 'x'}]\n"
    for i in range(7)
)


def generate() -> list[Case]:
    cases: list[Case] = []
    for name in NAMES:
        doc = template(name)
        cases += _types_and_absurd(name, doc)
        cases += _keys(name, doc)
        cases += _raw(name, doc)
        cases += _tricks(name, doc)
    cases += _files()
    return cases


def _case(cid: str, doc: dict[str, Any], key: str | None, name: str) -> Case:
    return Case(cid, dump(doc), key, name)


def _rotation(values: list[Any], j: int, take: int) -> list[tuple[int, Any]]:
    """``take`` of ``values`` for the j-th key path, rotating so every value is used
    across the paths while each path gets only a few (keeps the suite quick)."""
    n = len(values)
    return [((j * take + m) % n, values[(j * take + m) % n]) for m in range(take)]


def _types_and_absurd(name: str, doc: dict[str, Any]) -> list[Case]:
    out = []
    for j, (path, _) in enumerate(list(paths(doc))):
        for i, value in _rotation(WRONG_TYPES, j, 4):
            if path in ("run", "setup") and isinstance(value, float) and not math.isfinite(value):
                continue  # a command is its text as written: `run: .nan` runs ".nan"
            bad = replaced(doc, path, value)
            if schema_rejects(bad):
                out.append(_case(f"{name}:{path}:type{i}", bad, path, name))
        if _numeric(path):
            for i, value in _rotation(ABSURD, j, 7):
                bad = replaced(doc, path, value)
                if schema_rejects(bad) or value in BEYOND_SCHEMA:
                    out.append(_case(f"{name}:{path}:absurd{i}", bad, path, name))
    return out


def _numeric(path: str) -> bool:
    leaf = path.rsplit(".", 1)[-1]
    return leaf in {
        "cpus", "memory", "local_nvme", "disk", "max_price", "max_runtime", "max_cost",
        "idle_timeout", "params", "tokens", "seq_len", "micro_batch", "requests", "mfu",
        "input_tokens", "output_tokens", "lora_rank",
    }  # fmt: skip


def _keys(name: str, doc: dict[str, Any]) -> list[Case]:
    out = []
    blocks = [("", doc)] + [(p, v) for p, v in paths(doc) if isinstance(v, dict) and p != "env"]
    for path, block in blocks:
        for extra in ("zz_unknown", _typo(next(iter(block), "x"))):
            key = f"{path}.{extra}" if path else extra
            out.append(_case(f"{name}:{key}:unknown", replaced(doc, key, 1), key, name))
    for path in ("name", "run", "data[0].src", "data[0].dst", "outputs[0].src", "workload.kind"):
        try:
            bad = removed(doc, path)
        except (KeyError, IndexError, TypeError):
            continue
        out.append(_case(f"{name}:{path}:missing", bad, path, name))
    return out


def _typo(key: str) -> str:
    return key[:-1] + ("q" if not key.endswith("q") else "z") if len(key) > 2 else key + "zz"


def _raw(name: str, doc: dict[str, Any]) -> list[Case]:
    out = []
    scalars = [(p, v) for p, v in paths(doc) if not isinstance(v, dict | list)]
    for j, (path, _) in enumerate(scalars):
        for i, raw in _rotation(RAW_YAML, j, 2):
            text = dump(replaced(doc, path, PLACEHOLDER), raw)
            if raw == "*bomb":
                text = BOMB.encode() + text
            out.append(Case(f"{name}:{path}:raw{i}", text, path, name))
    return out


def _tricks(name: str, doc: dict[str, Any]) -> list[Case]:
    out = []
    for path, _ in list(paths(doc)):
        leaf = path.rsplit(".", 1)[-1]
        for i, value in enumerate(PATH_TRICKS.get(leaf, [])):
            if leaf == "dst" and path.startswith("outputs"):
                continue  # outputs.dst is a client path: anything goes
            out.append(_case(f"{name}:{path}:trick{i}", replaced(doc, path, value), path, name))
    huge = "H" * 1_100_000  # 1 MB values, never echoed back whole
    for path in ("name", "resources.gpu", "limits.max_runtime")[: 3 if name == NAMES[0] else 1]:
        try:
            out.append(_case(f"{name}:{path}:huge", replaced(doc, path, huge), path, name))
        except (KeyError, IndexError, TypeError):
            continue
    if "env" in doc:
        bad = replaced(doc, "env.BAD-NAME", "x")
        out.append(_case(f"{name}:env:bad-name", bad, "env.BAD-NAME", name))
    return out


def _files() -> list[Case]:
    base = (TEMPLATES / "quickstart.yaml").read_bytes()
    bad = {
        "nul": base.replace(b"name:", b"name:\x00", 1),
        "control": base.replace(b"name:", b"name: \x1b[31m", 1),
        "latin1": base + "\n# caf\xe9\n".encode("latin-1"),
        "utf16": base.decode().encode("utf-16"),
        "deep": base + b"env: {A: " + b"[" * 500 + b"]" * 500 + b"}\n",
        "empty": b"",
        "comment-only": b"# nothing\n",
        "scalar": b"just a string\n",
        "list": b"- name: x\n- run: y\n",
        "syntax": b"name: x\nrun: [unclosed\n",
        "tabs": b"name: x\n\trun: y\n",
        "dup": base + b"name: again\n",
    }
    return [Case(f"file:{k}", v, None, "quickstart") for k, v in bad.items()]
