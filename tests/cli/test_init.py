"""`cloudgpu init`, templates by name, and the hint on a missing job file: through click's
runner, and `launch quickstart` once as a real subprocess in an empty folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudgpu.cli import cli
from cloudgpu.scaffold import TEMPLATES, template_files
from cloudgpu.spec import load_job
from tests.lifecycle.helpers import cli_proc, main_exit

SOURCE = Path(__file__).resolve().parents[2] / "templates"


def run_in(path: Path, args: list[str]) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(path)
    try:
        return main_exit(args)
    finally:
        os.chdir(old)


def test_init_copies_quickstart_with_its_data(tmp_path: Path) -> None:
    code, out, _ = run_in(tmp_path, ["init"])
    assert code == 0, out
    assert (tmp_path / "quickstart.yaml").read_bytes() == (SOURCE / "quickstart.yaml").read_bytes()
    for f in (SOURCE / "quickstart-data").iterdir():
        assert (tmp_path / "quickstart-data" / f.name).read_bytes() == f.read_bytes()
    assert "next: cloudgpu launch quickstart.yaml --yes" in out
    assert load_job(tmp_path / "quickstart.yaml").name == "quickstart"


@pytest.mark.parametrize("name", [n for n, t in TEMPLATES.items() if t.job])
def test_every_job_template_is_complete_and_valid(tmp_path: Path, name: str) -> None:
    res = CliRunner().invoke(cli, ["init", name, str(tmp_path / "d"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    job = load_job(doc["job"])
    # Every local data source the job stages came with the template.
    for item in job.data:
        if "://" not in item.src:
            assert (tmp_path / "d" / item.src).is_dir(), item.src
    assert sorted(doc["files"]) == sorted(
        str(tmp_path / "d" / rel) for _, rel in template_files(TEMPLATES[name])
    )


def test_github_runner_template_lands_in_dot_github(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["init", "github-runner", str(tmp_path)])
    assert res.exit_code == 0, res.output
    wf = tmp_path / ".github" / "workflows"
    assert sorted(p.name for p in wf.iterdir()) == ["gpu-runner-gc.yml", "gpu-tests.yml"]
    # The workflows use the action from the repository itself (nothing unpinned).
    assert (tmp_path / ".github" / "actions" / "cloudgpu-runner" / "action.yml").is_file()
    assert f"edit {tmp_path}/.github/workflows/gpu-tests.yml" in res.output


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    (tmp_path / "quickstart.yaml").write_text("mine\n")
    code, _, err = run_in(tmp_path, ["init", "quickstart"])
    assert code == 2
    assert "quickstart.yaml exists" in err and "nothing was written" in err
    assert (tmp_path / "quickstart.yaml").read_text() == "mine\n"
    assert not (tmp_path / "quickstart-data").exists()  # refused whole, not half
    code, _, err = run_in(tmp_path, ["init", "quickstart", "--force"])
    assert code == 0, err
    assert (tmp_path / "quickstart.yaml").read_bytes() == (SOURCE / "quickstart.yaml").read_bytes()


def test_init_refuses_to_write_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "quickstart-data").symlink_to(outside)
    code, _, err = run_in(tmp_path, ["init", "quickstart", "dest", "--force"])
    assert code == 2 and "is a symlink" in err
    assert list(outside.iterdir()) == []
    assert not (dest / "quickstart.yaml").exists()


def test_init_list_and_unknown_template(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["init", "--list", "--json"])
    assert [r["name"] for r in json.loads(res.output)] == list(TEMPLATES)
    code, _, err = run_in(tmp_path, ["init", "quikstart"])
    assert code == 2 and "unknown template 'quikstart'" in err
    assert list(tmp_path.iterdir()) == []


def test_plan_takes_a_template_name_without_writing(tmp_path: Path) -> None:
    code, out, err = run_in(tmp_path, ["plan", "quickstart"])
    assert code == 0, err
    assert "local" in out
    assert list(tmp_path.iterdir()) == []  # plan only reads the packaged file


def test_missing_job_file_says_how_to_get_one(tmp_path: Path) -> None:
    code, _, err = run_in(tmp_path, ["launch", "job.yaml", "--yes"])
    assert code == 2
    assert "job.yaml: job file not found" in err
    assert "hint: `cloudgpu init` writes a starter job here" in err


@pytest.mark.slow
def test_launch_quickstart_by_name_in_an_empty_folder(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    res = cli_proc(["launch", "quickstart", "--yes"], tmp_path / "home", cwd=work)
    assert res.returncode == 0, res.stderr
    assert "copied template quickstart here" in res.stderr
    summary = json.loads((work / "quickstart-results" / "summary.json").read_text())
    assert set(summary) == {"numbers.csv", "poems.txt"}
    # A second launch uses the copy it finds (edited by the user), not the package's.
    text = (work / "quickstart.yaml").read_text().replace("max_cost: 1", "max_cost: 2")
    (work / "quickstart.yaml").write_text(text)
    res = cli_proc(["launch", "quickstart", "--yes", "--dry-run"], tmp_path / "home", cwd=work)
    assert res.returncode == 0 and "copied template" not in res.stderr
