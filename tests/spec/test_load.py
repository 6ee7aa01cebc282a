"""job.yaml validation: every error names file, line, key and the expected form."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.errors import SpecError
from cloudgpu.spec import GpuRequest, json_schema, load_job
from cloudgpu.spec.units import parse_duration_s, parse_gpu, parse_size_gb

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


def error_of(tmp_path: Path, text: str) -> SpecError:
    with pytest.raises(SpecError) as ei:
        load_job(write(tmp_path, text))
    return ei.value


@pytest.mark.parametrize("name", ["quickstart", "finetune", "batch-inference"])
def test_templates_are_valid(name: str) -> None:
    job = load_job(TEMPLATES / f"{name}.yaml")
    assert job.run.strip()
    assert job.name


def test_full_job(tmp_path: Path) -> None:
    (tmp_path / "dataset").mkdir()
    job = load_job(
        write(
            tmp_path,
            """
name: demo
resources:
  gpu: A100-80GB:8
  cpus: 16+
  memory: 128GB+
  local_nvme: 1.5TB+
  spot: auto
  max_price: 30
  providers: [aws, gcp]
  regions: ["us-*"]
data:
  - {src: ./dataset, dst: /nvme/data}
  - {src: s3://bucket/prefix, dst: /nvme/s3}
setup: pip install x
run: python train.py
outputs:
  - {src: /nvme/out/, dst: ./results}
env: {WANDB_MODE: offline, SEED: 3, DEBUG: true}
limits: {max_runtime: 1h30m, max_cost: 150, idle_timeout: 10m}
checkpoint: /nvme/out/ckpt
num_nodes: 1
""",
        )
    )
    r = job.resources
    assert r.gpu == GpuRequest(name="A100-80GB", count=8)
    assert (r.cpus, r.memory_gb, r.local_nvme_gb, r.spot) == (16, 128, 1500, "auto")
    assert r.providers == ("aws", "gcp") and r.regions == ("us-*",)
    assert job.limits.max_runtime_s == 5400 and job.limits.idle_timeout_s == 600
    assert job.env == {"WANDB_MODE": "offline", "SEED": "3", "DEBUG": "true"}
    assert job.outputs[0].src == "/nvme/out"
    assert job.base_dir == str(tmp_path)


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    e = error_of(tmp_path, "name: x\nrun: [unclosed\nsetup: y\n")
    assert e.line is not None and e.line >= 2
    assert "invalid YAML" in str(e) and str(tmp_path / "job.yaml") in str(e)


def test_unknown_key_did_you_mean(tmp_path: Path) -> None:
    e = error_of(tmp_path, "name: x\nrun: y\nresources:\n  gpus: H100\n")
    assert e.line == 4 and e.key == "resources.gpus"
    assert "did you mean 'gpu'" in str(e)
    e = error_of(tmp_path, "name: x\nrun: y\nlimit: {max_cost: 3}\n")
    assert e.line == 3 and "did you mean 'limits'" in str(e)


def test_missing_required(tmp_path: Path) -> None:
    e = error_of(tmp_path, "name: x\n")
    assert e.key == "run" and "missing required key" in str(e)


def test_duplicate_key(tmp_path: Path) -> None:
    e = error_of(tmp_path, "name: x\nrun: y\nrun: z\n")
    assert e.line == 3 and "duplicate" in str(e)


@pytest.mark.parametrize(
    ("text", "key", "line", "form"),
    [
        ("resources:\n  gpu: A100:zero\n", "resources.gpu", 4, "A100-80GB:8"),
        ("resources:\n  memory: lots\n", "resources.memory", 4, "500GB"),
        ("resources:\n  spot: maybe\n", "resources.spot", 4, "true | false | auto"),
        ("resources:\n  cpus: -3\n", "resources.cpus", 4, "16+"),
        ("resources:\n  max_price: free\n", "resources.max_price", 4, "a number (USD/hour)"),
        ("limits:\n  max_runtime: 10\n", "limits.max_runtime", 4, '"6h"'),
        ("limits:\n  idle_timeout: 5 minutes\n", "limits.idle_timeout", 4, '"10m"'),
        ("env:\n  BAD-NAME: 1\n", "env.BAD-NAME", 4, "variable name"),
        ("checkpoint: ckpt\n", "checkpoint", 3, "absolute path"),
        ("outputs:\n  - {src: /nvme/out}\n", "outputs[0].dst", 4, "missing required"),
        ("data: ./x\n", "data", 3, "expected a list"),
        ("data:\n  - {src: gs://b/x, dst: /nvme/x}\n", "data[0].src", 4, "gs://BUCKET"),
        ("data:\n  - {src: az://acct, dst: /nvme/x}\n", "data[0].src", 4, "az://ACCOUNT/CONTAINER"),
        ("data:\n  - {src: http://h.example/x, dst: /nvme/n}\n", "data[0].src", 4, "https://"),
        ("data:\n  - {src: s3://bkt/x, dst: /nvme/n, pack: true}\n", "data[0].pack", 4, "local"),
        (
            "data:\n  - {src: s3://bkt/x, dst: /nvme/n, workers: 0}\n",
            "data[0].workers",
            4,
            "1 to 256",
        ),
        (
            "data:\n  - {src: s3://bkt/x, dst: /nvme/n, exclude: {a: 1}}\n",
            "data[0].exclude",
            4,
            "list",
        ),
        (
            "data:\n  - {src: s3://bkt/x, dst: /nvme/n, excludes: [a]}\n",
            "data[0].excludes",
            4,
            "exclude",
        ),
        ("name2: z\n", "name2", 3, "did you mean 'name'"),
    ],
)
def test_bad_values(tmp_path: Path, text: str, key: str, line: int, form: str) -> None:
    e = error_of(tmp_path, "name: x\nrun: y\n" + text)
    assert (e.key, e.line) == (key, line), str(e)
    assert form in str(e)
    assert "\n" not in str(e)


def test_missing_data_path(tmp_path: Path) -> None:
    e = error_of(tmp_path, "name: x\nrun: y\ndata:\n  - src: ./nope\n    dst: /nvme/d\n")
    assert e.key == "data[0].src" and e.line == 4
    assert "does not exist" in str(e) and "nope" in str(e)


def test_num_nodes_fixed_or_a_range(tmp_path: Path) -> None:
    fixed = load_job(write(tmp_path, "name: x\nrun: y\nnum_nodes: 4\n"))
    assert (fixed.num_nodes, fixed.max_nodes, list(fixed.node_counts)) == (4, 4, [4])
    ranged = load_job(write(tmp_path, 'name: x\nrun: y\nnum_nodes: "1-3"\n'))
    assert (ranged.num_nodes, ranged.max_nodes, list(ranged.node_counts)) == (1, 3, [1, 2, 3])
    for bad in ("0", '"3-1"', "65", '"two"', "true"):
        e = error_of(tmp_path, f"name: x\nrun: y\nnum_nodes: {bad}\n")
        assert e.key == "num_nodes" and 'a range like "1-4"' in str(e)


def test_bad_name(tmp_path: Path) -> None:
    e = error_of(tmp_path, "name: My Job\nrun: y\n")
    assert e.key == "name" and "lowercase" in str(e)


def test_empty_and_missing_file(tmp_path: Path) -> None:
    assert "empty" in str(error_of(tmp_path, ""))
    with pytest.raises(SpecError, match="not found"):
        load_job(tmp_path / "absent.yaml")


def test_units() -> None:
    assert parse_size_gb("500GB+") == 500
    assert parse_size_gb("64GiB") == pytest.approx(68.72, rel=1e-3)
    assert parse_size_gb(40) == 40
    assert parse_duration_s("1d2h") == 93600
    assert parse_gpu("none").cpu_only and parse_gpu(0).cpu_only
    assert parse_gpu("any:2") == GpuRequest(any_gpu=True, count=2)
    assert parse_gpu("24GB+") == GpuRequest(min_memory_gb=24)
    assert parse_gpu("H100") == GpuRequest(name="H100")
    for bad in ("10", "h", "-1h", ""):
        with pytest.raises(ValueError):
            parse_duration_s(bad)
    for bad in ("A100:0", "24GB", "a/b"):
        with pytest.raises(ValueError):
            parse_gpu(bad)


def test_schema_lists_every_key() -> None:
    s = json_schema()
    assert set(s["required"]) == {"name", "run"}
    assert "gpu" in s["properties"]["resources"]["properties"]
    assert s["additionalProperties"] is False
