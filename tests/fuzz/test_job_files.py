"""Malformed job files (tests/fuzz/cases.py, well over 500 of them): `schema --check`,
`plan` and `launch` each answer with the same one line naming the file and the key, exit
2, never "internal error", and nothing is created or written; the JSON Schema rejects
every case the loader rejects, except the rules it cannot state (beyond_schema).

The cases run in-process through click's runner (fast); a sample also as subprocesses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cloudgpu.errors import SpecError
from cloudgpu.spec import parse_job
from tests.fuzz.cases import BOMB, NAMES, TEMPLATES, Case, generate, schema_rejects
from tests.lifecycle.helpers import main_exit

CASES = generate()
COMMANDS = (["schema", "--check"], ["plan"], ["launch", "--dry-run", "--yes"])


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 500
    kinds = {c.id.rsplit(":", 1)[-1].rstrip("0123456789") for c in CASES}
    for kind in ("type", "absurd", "unknown", "missing", "raw", "trick", "huge", "utf"):
        assert any(k.startswith(kind) for k in kinds), kind


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The templates' data beside the case files, so local data paths resolve."""
    root = tmp_path_factory.mktemp("fuzz")
    for item in TEMPLATES.iterdir():
        if item.is_dir() and item.name.endswith(("-data", "-code")):
            shutil.copytree(item, root / item.name)
    return root


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _top(root: Path) -> set[str]:
    return set(os.listdir(root))


def _one_line(err: str, path: Path) -> str:
    lines = err.splitlines()
    assert lines and lines[0].startswith(f"error: {path}"), err[:500]
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), err[:500]
    assert "internal error" not in err and "Traceback" not in err
    assert len(lines[0]) <= 1100  # a huge value is never echoed whole
    return lines[0]


@pytest.fixture
def chdir_to(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(workdir)
    yield workdir


def _run_case(case: Case, workdir: Path, home: Path, every_command: bool) -> None:
    path = workdir / f"{case.template}-case.yaml"
    path.write_bytes(case.text)
    before = _top(workdir)  # the whole tree is compared once, after every case
    verdicts = []
    for cmd in COMMANDS if every_command else COMMANDS[:2]:
        code, _, err = main_exit([*cmd, str(path)])
        assert code == 2, (case.id, cmd, err[:300])
        verdicts.append(_one_line(err, path))
    assert len(set(verdicts)) == 1, (case.id, verdicts)
    line = verdicts[0]
    if case.key is None:
        assert f"{path}:" in line, (case.id, line)  # the file, with its line when known
    else:
        named = any(f": {case.key}{end}" in line for end in (":", ".", "["))
        assert named, (case.id, line[:300])
    assert _top(workdir) == before, case.id  # nothing written beside the job
    assert not home.exists() or not any(home.rglob("*.db")), case.id  # no state created


def test_every_case_is_one_located_line_with_one_verdict(
    chdir_to: Path, cloudgpu_home: Path
) -> None:
    failed = []
    tree = _listing(chdir_to)
    for i, case in enumerate(CASES):
        try:  # schema --check and plan on every case; launch too on every third
            _run_case(case, chdir_to, cloudgpu_home, every_command=i % 3 == 0)
        except AssertionError as exc:
            failed.append(str(exc)[:400])
    assert not failed, f"{len(failed)} of {len(CASES)} cases:\n" + "\n".join(failed[:40])
    assert _listing(chdir_to) - tree <= {f"{n}-case.yaml" for n in NAMES}


def test_the_json_schema_rejects_what_the_loader_rejects(workdir: Path) -> None:
    """Where the schema accepts a case, the loader's error says the rule is beyond it."""
    for case in CASES:
        if case.text.startswith(BOMB.encode()):
            continue  # as JSON the alias bomb is millions of values; the CLI test has it
        try:
            text = case.text.decode("utf-8")
            doc = yaml.load(text, Loader=yaml.CSafeLoader)
        except (UnicodeDecodeError, yaml.YAMLError, RecursionError):
            continue  # not YAML at all: no schema verdict to compare
        with pytest.raises(SpecError) as ei:
            parse_job(text, file="case.yaml", base_dir=str(workdir))
        if not schema_rejects(doc):
            assert ei.value.beyond_schema, (case.id, str(ei.value)[:200])


@pytest.mark.parametrize(
    "case", [next(c for c in CASES if c.id.endswith(end)) for end in (":raw1", ":utf16")]
)
def test_a_sample_as_subprocesses(case: Case, workdir: Path, cloudgpu_home: Path) -> None:
    path = workdir / "sub-case.yaml"
    path.write_bytes(case.text)
    res = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CLOUDGPU_HOME": str(cloudgpu_home)},
        check=False,
    )
    assert res.returncode == 2, res.stderr
    _one_line(res.stderr, path)
