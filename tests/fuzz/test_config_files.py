"""Malformed config.toml files: every key of every section and of every installed
provider's table (its declared config_keys) gets wrong types and absurd values, kept only
where the key's own JSON Schema (fields.json_schema_of, the one definition) rejects them
or JSON cannot hold them (NaN, infinity). `check` and `plan` each answer with the same one
line at file:line naming the key, exit 2, never "internal error".
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema

from cloudgpu.config import SECTIONS, Config
from cloudgpu.paths import default_paths
from cloudgpu.registry import COMMON_KEYS, Registry
from cloudgpu.spec.fields import ANY, Block, ListOf, Node, json_schema_of
from tests.fuzz.cases import TEMPLATES
from tests.lifecycle.helpers import main_exit

# TOML spellings of values, with the Python value the schema is asked about
BAD: list[tuple[str, Any]] = [
    ("nan", math.nan),
    ("inf", math.inf),
    ("-1", -1),
    ("0", 0),
    ("1e30", 1e30),
    ('""', ""),
    (f'"{"x" * 5000}"', "x" * 5000),
    ("true", True),
    ('"no"', "no"),
    ("[1, 2]", [1, 2]),
    ("{ a = 1 }", {"a": 1}),
    ("2026-01-01T00:00:00Z", "a date"),  # TOML's own datetime: no JSON type at all
]


def _leaves(block: Block, prefix: str) -> Iterator[tuple[str, Node]]:
    for name, node in block.keys.items():
        if node is ANY or (isinstance(node, Block) and node.values is not None):
            continue  # open tables are checked by their owner, not by a schema here
        if isinstance(node, ListOf) and isinstance(node.item, Block):
            continue  # arrays of tables ([[providers.sim.offers]]): test_config_check
        yield f"{prefix}.{name}" if prefix else name, node


def _tables() -> Iterator[tuple[str, Block]]:
    for section, node in SECTIONS.items():
        if isinstance(node, Block) and node.values is None:
            yield section, node
    registry = Registry(Config(), default_paths({"CLOUDGPU_HOME": "/nonexistent"}), {})
    for name in registry.names():
        keys = registry.provider_class(name).config_keys
        if keys is not None:
            yield f"providers.{name}", Block({**COMMON_KEYS, **keys})


def _rejects(schema: dict[str, Any], value: Any) -> bool:
    if value == "a date":
        return True
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return True
    return not jsonschema.Draft202012Validator(schema).is_valid(value)


def cases() -> list[tuple[str, str, str]]:
    """(case id, config text, key the error must name)."""
    out = []
    leaves = [(table, key, node) for table, block in _tables() for key, node in _leaves(block, "")]
    for j, (table, key, node) in enumerate(leaves):
        schema = json_schema_of(node)
        for m in range(5):  # 5 of the bad values per key, rotating: each is used often
            spelled, value = BAD[(j * 5 + m) % len(BAD)]
            if _rejects(schema, value):
                text = f"[{table}]\n{key} = {spelled}\n"
                out.append((f"{table}.{key}={spelled[:12]}", text, f"{table}.{key}"))
    return out


CASES = cases()


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 150
    assert any(c[2].startswith("providers.") for c in CASES)


def test_every_bad_config_value_is_one_located_line(cloudgpu_home: Path) -> None:
    path = cloudgpu_home / "config" / "config.toml"
    path.parent.mkdir(parents=True)
    job = str(TEMPLATES / "quickstart.yaml")
    failed = []
    for cid, text, key in CASES:
        path.write_text(text)
        verdicts = set()
        for args in (["check"], ["plan", job]):
            code, _, err = main_exit(args)
            lines = err.splitlines()
            first = lines[0] if lines else ""
            ok = (
                code == 2
                and first.startswith(f"error: {path}:2: {key}")
                and len(lines) <= 2
                and len(first) <= 1100
                and "internal error" not in err
            )
            if not ok:
                failed.append(f"{cid} {args[0]} -> {code}: {err[:200]!r}")
            verdicts.add(first)
        if len(verdicts) != 1:
            failed.append(f"{cid}: check and plan disagree: {verdicts}")
    assert not failed, f"{len(failed)} of {len(CASES)}:\n" + "\n".join(failed[:30])
