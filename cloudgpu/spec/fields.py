"""The small vocabulary the job file's one definition (cloudgpu.spec.schema) is written in.

A definition is a tree of three kinds of node: :class:`Value` (a leaf: its JSON Schema
and the parser the loader runs), :class:`Block` (a mapping with known keys) and
:class:`ListOf`. The loader walks the same tree the JSON Schema is generated from, so the
two cannot drift apart. Parsers raise ValueError whose text names the expected form;
:class:`Unchecked` marks a rule the JSON Schema cannot state (a magnitude hidden in a
unit string such as "99999999d"), so tests can tell a real disagreement from that.

The value constructors below (``text``, ``number``, ``choice``, ``unit``...) are what a
new key is declared with; each returns a Value whose schema and parser say the same.
Nothing here reads files or knows which keys exist.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Parse = Callable[[Any], Any]
MAX_TEXT = 4096  # characters of a name, path or other short text
MAX_COMMAND = 1 << 20  # characters of a setup/run script
MAX_ITEMS = 1000  # entries of a list or an open mapping
NO_NUL_TEXT = r"^[^\x00]*\S[^\x00]*$"  # some non-space, and no NUL (execve refuses it)


class Unchecked(ValueError):
    """A rule the JSON Schema cannot express (the loader is stricter there)."""


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: errors never echo a huge value whole."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}...' ({len(str(value)):,} characters)"


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 30]}... ({len(text):,} characters)"


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Value:
    """A leaf key. ``attr`` names the model field when it differs from the key; ``raw``
    takes the scalar's text as written (shell commands: ``run: true`` runs ``true``)."""

    schema: Mapping[str, Any]
    parse: Parse = _same
    description: str = ""
    attr: str | None = None
    raw: bool = False


@dataclass(frozen=True)
class Block:
    """A mapping. ``keys`` are the allowed keys; with ``values`` it is an open mapping
    whose keys match ``key_pattern`` (env:). ``extensions`` allows ``x-`` keys that the
    loader ignores (a place for YAML anchors shared through ``<<:`` merge keys). With
    ``scalar_key`` a single value stands for ``{scalar_key: value}`` (``checkpoint:``)."""

    keys: Mapping[str, Node] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    description: str = ""
    values: Node | None = None
    key_pattern: str | None = None
    key_form: str = ""
    extensions: bool = False
    scalar_key: str | None = None


@dataclass(frozen=True)
class ListOf:
    """A list; with ``scalar_ok`` a single value stands for a list of one."""

    item: Node
    description: str = ""
    scalar_ok: bool = False


Node = Value | Block | ListOf
# Any value of any shape: for tables another module checks (kept as they are).
ANY = Value({})


# -- value constructors ----------------------------------------------------------------


def in_range(
    x: float,
    lo: float,
    hi: float,
    what: str,
    *,
    lo_open: bool = True,
    from_text: bool = False,
    original: object = None,
) -> float:
    """``x`` if finite and within the bounds, else a ValueError naming the range."""
    error = Unchecked if from_text else ValueError
    got = shown(x if original is None else original)
    if not math.isfinite(x):
        raise error(f"expected {what}, got {got} (numbers must be finite)")
    if not (x > lo if lo_open else x >= lo) or x > hi:
        span = f"above {lo:g} and up to {hi:g}" if lo_open else f"from {lo:g} to {hi:g}"
        raise error(f"expected {what} {span}, got {got}")
    return x


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def as_float(value: float) -> float:
    """``float(value)``, with integers too large for a float as infinity (not a crash)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _whole(value: float) -> bool:
    return isinstance(value, int) or (math.isfinite(value) and value.is_integer())


def text(
    description: str = "",
    *,
    pattern: str | None = None,
    form: str = "text",
    max_len: int = MAX_TEXT,
    attr: str | None = None,
) -> Value:
    """A non-empty string (``pattern``: a regex it must match, ``form`` says it in words)."""
    rx = re.compile(pattern) if pattern else None

    def parse(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected {form}, got {shown(value)} (quote it to make it text)")
        if not value.strip():
            raise ValueError(f"expected {form}, got an empty string")
        if len(value) > max_len:
            raise ValueError(f"expected at most {max_len} characters, got {len(value):,}")
        if "\x00" in value:
            raise ValueError(f"expected {form} without NUL bytes")
        if rx is not None and not rx.search(value):
            raise ValueError(f"expected {form}, got {shown(value)}")
        return value

    schema: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": max_len}
    if pattern:
        schema["pattern"] = pattern
    else:
        schema["pattern"] = NO_NUL_TEXT
    return Value(schema, parse, description, attr)


def command(description: str) -> Value:
    """A shell command: the scalar's text as written; never empty."""

    def parse(value: Any) -> str:
        if not str(value).strip():
            raise ValueError("expected a command, got an empty string")
        if "\x00" in str(value):
            raise ValueError("expected a command without NUL bytes")
        if len(str(value)) > MAX_COMMAND:
            raise ValueError(f"expected at most {MAX_COMMAND:,} characters, got {len(value):,}")
        return str(value)

    schema = {
        "anyOf": [
            {"type": "string", "pattern": NO_NUL_TEXT, "maxLength": MAX_COMMAND},
            {"type": ["number", "boolean"]},
        ]
    }
    return Value(schema, parse, description, raw=True)


def number(
    description: str,
    lo: float,
    hi: float,
    *,
    unit: str = "",
    integer: bool = False,
    lo_open: bool = True,
    attr: str | None = None,
    form: str | None = None,
) -> Value:
    """A plain YAML number within (lo, hi] (``lo_open=False``: [lo, hi]); ``form`` names
    it in messages (default: "a number (unit)")."""
    kind = "a whole number" if integer else "a number"
    what = form or (f"{kind} ({unit})" if unit else kind)

    def parse(value: Any) -> float | int:
        if not is_number(value) or (integer and not _whole(value)):
            raise ValueError(f"expected {what}, got {shown(value)}")
        in_range(as_float(value), lo, hi, what, lo_open=lo_open, original=value)
        return int(value) if integer else float(value)

    bound = "exclusiveMinimum" if lo_open else "minimum"
    schema = {"type": "integer" if integer else "number", bound: lo, "maximum": hi}
    return Value(schema, parse, description, attr)


def port(description: str = "a TCP port") -> Value:
    return number(description, 1, 65_535, integer=True, lo_open=False, form="a port number")


def _ci(word: str, seps: bool) -> str:
    """A regex matching ``word`` in any case (and with optional - or _ between letters)."""
    chars = [f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word]
    return "[-_]?".join(chars) if seps else "".join(chars)


def choice(
    description: str,
    options: Sequence[str],
    *,
    booleans: Mapping[bool, str] | None = None,
    loose: bool = False,
    attr: str | None = None,
) -> Value:
    """One of ``options``, in any case (``loose``: also with - or _ anywhere, so
    ``adam-8bit`` is ``adam8bit``); ``booleans`` maps YAML true/false onto options."""

    def key(s: str) -> str:
        s = s.lower()
        return s.replace("-", "").replace("_", "") if loose else s

    table = {key(o): o for o in options}

    def parse(value: Any) -> str:
        if isinstance(value, bool) and booleans is not None:
            return booleans[value]
        if isinstance(value, str) and key(value.strip()) in table:
            return table[key(value.strip())]
        words = [*options, *(("true", "false") if booleans else ())]
        allowed = " | ".join(dict.fromkeys(words))
        raise ValueError(f"expected one of {allowed}, got {shown(value)}")

    pattern = "^\\s*(" + "|".join(_ci(o.replace("_", "") if loose else o, loose) for o in options)
    any_of: list[dict[str, Any]] = [
        {"enum": list(options)},
        {"type": "string", "pattern": pattern + ")\\s*$"},
    ]
    if booleans is not None:
        any_of.append({"type": "boolean"})
    return Value({"anyOf": any_of}, parse, description, attr)


def unit(
    description: str,
    parse_text: Callable[[Any], float],
    pattern: str,
    lo: float,
    hi: float,
    what: str,
    *,
    numbers: bool = True,
    lo_open: bool = False,
    attr: str | None = None,
    convert: Callable[[float], Any] = _same,
) -> Value:
    """A quantity written with a unit ("500GB+", "1h30m", "2B") or, with ``numbers``, a
    bare number; ``parse_text`` turns either into a float, which must lie in [lo, hi]."""

    def parse(value: Any) -> Any:
        if isinstance(value, bool) or not (
            (is_number(value) and numbers) or isinstance(value, str)
        ):
            raise ValueError(f"expected {what}, got {shown(value)}")
        if is_number(value):
            in_range(as_float(value), lo, hi, what, lo_open=lo_open, original=value)
        if isinstance(value, str) and len(value) > 100:
            raise ValueError(f"expected {what}, got {shown(value)}")
        x = parse_text(value)
        return convert(in_range(x, lo, hi, what, lo_open=lo_open, from_text=True, original=value))

    bound = "exclusiveMinimum" if lo_open else "minimum"
    forms: list[dict[str, Any]] = [{"type": "string", "pattern": pattern, "maxLength": 100}]
    if numbers:
        forms.append({"type": "number", bound: lo, "maximum": hi})
    return Value({"anyOf": forms}, parse, description, attr)


def flag(description: str) -> Value:
    """YAML true or false."""

    def parse(value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {shown(value)}")
        return value

    return Value({"type": "boolean"}, parse, description)


def checked(inner: Value) -> Value:
    """``inner``'s checks, but the value is kept as written (for blocks another module
    interprets, such as workload:, which the planner reads)."""

    def parse(value: Any) -> Any:
        inner.parse(value)
        return value

    return Value(inner.schema, parse, inner.description, inner.attr, inner.raw)


def either(description: str, *values: Value) -> Value:
    """The first of ``values`` that accepts (e.g. a whole number, or ``auto``)."""

    def parse(value: Any) -> Any:
        errors = []
        for v in values:
            try:
                return v.parse(value)
            except ValueError as exc:
                errors.append(str(exc).removeprefix("expected "))
        raise ValueError("expected " + "; or ".join(errors))

    return Value({"anyOf": [dict(v.schema) for v in values]}, parse, description)


# -- checking plain data (config files, already parsed) ---------------------------------


class FieldError(ValueError):
    """A value of plain data broke its definition: ``key`` is its dotted path."""

    def __init__(self, key: str, message: str, *, beyond: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.beyond_schema = beyond


def unknown_key(name: str, allowed: Sequence[str]) -> str:
    """The message for a key that is not allowed, with the closest one when near."""
    close = difflib.get_close_matches(name[:100], list(allowed), n=1, cutoff=0.6)
    guess = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key; {guess}expected one of: {', '.join(sorted(allowed))}"


def _join(key: str, name: str) -> str:
    return f"{key}.{clip(name, 80)}" if key else clip(name, 80)


def check(defn: Node, value: Any, key: str) -> Any:
    """``value`` (parsed JSON/TOML data) checked against ``defn``; FieldError naming the
    dotted key on the first problem. Returns the parsed values."""
    if isinstance(defn, Block):
        return _check_block(defn, value, key)
    if isinstance(defn, ListOf):
        if defn.scalar_ok and not isinstance(value, list | Mapping):
            return [check(defn.item, value, key)]
        if not isinstance(value, list):
            raise FieldError(key, f"expected a list, got {shown(value)}")
        if len(value) > MAX_ITEMS:
            raise FieldError(key, f"expected at most {MAX_ITEMS} entries, got {len(value)}")
        return [check(defn.item, item, f"{key}[{i}]") for i, item in enumerate(value)]
    if defn is ANY:
        return value
    if isinstance(value, list | Mapping):
        raise FieldError(
            key, f"expected a single value, got a {'list' if isinstance(value, list) else 'table'}"
        )
    try:
        return defn.parse(str(value) if defn.raw else value)
    except Unchecked as exc:
        raise FieldError(key, str(exc), beyond=True) from None
    except ValueError as exc:
        raise FieldError(key, str(exc)) from None


def _check_block(defn: Block, value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise FieldError(key, f"expected a table of key = value lines, got {shown(value)}")
    if len(value) > MAX_ITEMS:
        raise FieldError(key, f"expected at most {MAX_ITEMS} keys, got {len(value)}")
    out = {}
    for name, item in value.items():
        full = _join(key, str(name))
        if defn.values is not None:
            if defn.key_pattern and not re.match(defn.key_pattern, str(name)):
                raise FieldError(full, f"expected {defn.key_form or 'another key'}")
            out[name] = check(defn.values, item, full)
        elif name in defn.keys:
            out[name] = check(defn.keys[name], item, full)
        else:
            raise FieldError(full, unknown_key(str(name), list(defn.keys)))
    for req in defn.required:
        if req not in value:
            raise FieldError(_join(key, req), f"missing required key '{req}'")
    return out


# -- JSON Schema -------------------------------------------------------------------------


def json_schema_of(node: Node) -> dict[str, Any]:
    """The JSON Schema fragment of a definition node."""
    if isinstance(node, Value):
        out = dict(node.schema)
        if node.description:
            out["description"] = node.description
        return out
    if isinstance(node, ListOf):
        items = {"type": "array", "items": json_schema_of(node.item), "maxItems": MAX_ITEMS}
        out = {"anyOf": [items, json_schema_of(node.item)]} if node.scalar_ok else items
        if node.description:
            out["description"] = node.description
        return out
    out = {"type": "object", "maxProperties": MAX_ITEMS}
    if node.description:
        out["description"] = node.description
    if node.values is not None:
        out["additionalProperties"] = json_schema_of(node.values)
        if node.key_pattern:
            out["propertyNames"] = {"pattern": node.key_pattern}
        return out
    out["properties"] = {k: json_schema_of(v) for k, v in node.keys.items()}
    out["additionalProperties"] = False
    if node.extensions:
        out["patternProperties"] = {"^x-": {}}
    if node.required:
        out["required"] = list(node.required)
    if node.scalar_key:
        out = {"anyOf": [json_schema_of(node.keys[node.scalar_key]), out]}
    return out
