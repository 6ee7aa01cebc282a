"""The layers hold: imports flow one way, providers stay plugins, no import hides in a
function. Fails when a module imports upward across the layers

    cli -> lifecycle/planner/reports/runners/costs/data -> catalog/state/remote/spec
        -> the provider contract and its value types

or when the core imports a provider plugin (it finds them only through entry points),
or a plugin reaches past the contract into the lifecycle, the planner or the CLI.
Imports are read from the source with ``ast``, so nothing here is imported."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layer of each part of cloudgpu; a module may import its own layer or a lower one.
CONTRACT, BASE, CORE, CLI = 0, 1, 2, 3
LAYERS: dict[str, int] = {
    "cloudgpu": CONTRACT,  # the package itself: __version__
    "cloudgpu.provider": CONTRACT,
    "cloudgpu.provider_types": CONTRACT,  # the contract's value types (re-exported by it)
    "cloudgpu.batch": CONTRACT,  # the batch provider contract (CreateRequest.batch)
    "cloudgpu.errors": CONTRACT,
    "cloudgpu.paths": CONTRACT,
    "cloudgpu.atomicfile": CONTRACT,
    "cloudgpu.retry": CONTRACT,
    "cloudgpu.texttable": CONTRACT,
    "cloudgpu.httpjson": CONTRACT,  # the REST client providers build on
    "cloudgpu.userfile": CONTRACT,
    "cloudgpu.catalog.offer": CONTRACT,  # Offer is a value type of the contract
    "cloudgpu.spec.fields": CONTRACT,  # the key vocabulary providers declare config in
    "cloudgpu.catalog": BASE,
    "cloudgpu.state": BASE,
    "cloudgpu.remote": BASE,
    "cloudgpu.spec": BASE,
    "cloudgpu.config": BASE,
    "cloudgpu.registry": BASE,
    "cloudgpu.sshkeys": BASE,
    "cloudgpu.data.uri": BASE,  # a pure parser of data source URIs (the job file uses it)
    "cloudgpu.builtin": BASE,  # local and ssh: plugins shipped with the core
    "cloudgpu.lifecycle": CORE,
    "cloudgpu.planner": CORE,
    "cloudgpu.reports": CORE,
    "cloudgpu.runners": CORE,
    "cloudgpu.costs": CORE,
    "cloudgpu.data": CORE,
    "cloudgpu.scaffold": CORE,
    "cloudgpu.testing": CORE,  # the shared provider test suite (imports pytest)
    "cloudgpu.cli": CLI,
    "cloudgpu.__main__": CLI,
}
NAMES = {CONTRACT: "contract", BASE: "catalog/state/remote", CORE: "core", CLI: "cli"}
PLUGINS = ("cloudgpu_providers", "cloudgpu.builtin")


@dataclass(frozen=True)
class Imp:
    module: str  # the importing module
    target: str  # what it imports
    line: int
    in_function: bool


def layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        hit = LAYERS.get(".".join(parts[:n]))
        if hit is not None:
            return hit
    raise AssertionError(f"{module}: no layer; add its package to LAYERS in {__file__}")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "providers":
        parts[0] = "cloudgpu_providers"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _submodule(package: str, name: str) -> str:
    parts = package.split(".")
    if parts[0] == "cloudgpu_providers":
        parts[0] = "providers"
    base = ROOT.joinpath(*parts, name)
    is_module = base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
    return f"{package}.{name}" if is_module else package


def _imports(path: Path) -> list[Imp]:
    module = _module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(n) for n in ast.walk(fn)}
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` imports the module pkg.mod, not all of pkg.
            targets = [_submodule(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for t in targets:
            if t.split(".")[0] in ("cloudgpu", "cloudgpu_providers"):
                out.append(Imp(module, t, node.lineno, id(node) in inside))
    return out


def _all_imports() -> list[Imp]:
    files = [*(ROOT / "cloudgpu").rglob("*.py"), *(ROOT / "providers").rglob("*.py")]
    return [imp for f in sorted(files) for imp in _imports(f)]


IMPORTS = _all_imports()


def _is_plugin(module: str) -> bool:
    return module.startswith(PLUGINS)


def upward(imports: list[Imp]) -> list[str]:
    return [
        f"{i.module}:{i.line} imports {i.target} ({NAMES[layer(i.module)]} -> "
        f"{NAMES[layer(i.target)]})"
        for i in imports
        if not i.target.startswith("cloudgpu_providers")
        and not _is_plugin(i.module)
        and layer(i.target) > layer(i.module)
    ]


def test_no_upward_imports_across_the_layers() -> None:
    bad = upward(IMPORTS)
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_core_never_imports_a_provider_plugin() -> None:
    """Plugins are found through the cloudgpu.providers entry points only."""
    bad = [
        f"{i.module}:{i.line} imports {i.target}"
        for i in IMPORTS
        if i.target.startswith(PLUGINS)
        and not _is_plugin(i.module)
        and not i.target.startswith(i.module)
    ]
    assert not bad, "\n".join(bad)


def test_plugins_use_only_the_contract_and_the_base_layer() -> None:
    bad = [
        f"{i.module}:{i.line} imports {i.target}"
        for i in IMPORTS
        if _is_plugin(i.module) and not i.target.startswith(PLUGINS) and layer(i.target) > BASE
    ]
    assert not bad, "plugins reaching past the contract:\n" + "\n".join(bad)


def test_no_project_import_hides_in_a_function() -> None:
    """Imports inside functions dodge import cycles; only heavy SDKs may load lazily."""
    bad = [f"{i.module}:{i.line} imports {i.target}" for i in IMPORTS if i.in_function]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("module", "target", "caught"),
    [
        ("cloudgpu.catalog.query", "cloudgpu.planner.rank", True),
        ("cloudgpu.provider", "cloudgpu.state.store", True),
        ("cloudgpu.lifecycle.run", "cloudgpu.cli.launch", True),
        ("cloudgpu.spec.load", "cloudgpu.data.pull", True),
        ("cloudgpu.spec.load", "cloudgpu.data.uri", False),
        ("cloudgpu.cli.plan", "cloudgpu.planner.choose", False),
        ("cloudgpu.lifecycle.run", "cloudgpu.costs.billing", False),  # peers
    ],
)
def test_the_check_catches_an_upward_import(module: str, target: str, caught: bool) -> None:
    assert bool(upward([Imp(module, target, 1, False)])) is caught
