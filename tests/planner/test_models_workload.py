"""The bundled model table, the params-only rule, and workload validation."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources

import pytest

from cloudgpu.errors import ConfigError
from cloudgpu.planner import arch_from_params, known_models, lookup_model, parse_workload
from cloudgpu.planner.workload import parse_bytes, parse_count


def test_every_row_has_a_source_and_its_shape_adds_up_to_its_published_size() -> None:
    raw = json.loads(resources.files("cloudgpu.planner.data").joinpath("models.json").read_text())
    assert "Retrieved" in raw["_about"]
    for row in raw["models"]:
        assert row["source"].startswith("https://"), row["name"]
        arch = dataclasses.replace(lookup_model(row["name"]), params=0.0)
        assert arch.total_params == pytest.approx(row["params_b"] * 1e9, rel=0.01), row["name"]


def test_required_models_are_bundled_and_aliases_resolve() -> None:
    for name in (
        "llama-3-8b",
        "llama-3.1-8b",
        "llama-3-70b",
        "llama-3.1-405b",
        "mistral-7b",
        "mixtral-8x7b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "gemma-2-9b",
        "gemma-2-27b",
        "phi-3-mini",
    ):
        assert name in known_models()
    assert lookup_model("meta-llama/Meta-Llama-3-8B").name == "llama-3-8b"
    assert lookup_model("Llama3_70B").name == "llama-3-70b"
    assert lookup_model("mixtral-8x7b").active_params == pytest.approx(12.9e9, rel=0.01)


def test_unknown_model_suggests_the_closest_names() -> None:
    with pytest.raises(ConfigError) as err:
        lookup_model("lama-3-70b")
    assert "unknown model 'lama-3-70b'" in str(err.value)
    assert err.value.hint is not None and "llama-3-70b" in err.value.hint


@pytest.mark.parametrize(
    ("params", "layers", "hidden"),
    # Llama-2 7B / 13B / 70B published sizes and shapes
    [(6.74e9, 32, 4096), (13.0e9, 40, 5120), (69e9, 80, 8448)],
)
def test_params_only_rule_lands_on_the_llama_shapes(
    params: float, layers: int, hidden: int
) -> None:
    arch = arch_from_params(params)
    assert (arch.layers, arch.hidden) == (layers, hidden)  # 70B: 8192 with GQA, within 4%
    assert arch.inferred and arch.total_params == params
    assert arch.kv_heads == arch.heads  # no GQA assumed: the conservative KV cache


def test_counts_and_sizes() -> None:
    assert parse_count("2B", "tokens") == 2e9
    assert parse_count("1.5t", "tokens") == 1.5e12
    assert parse_count(500, "tokens") == 500
    assert parse_bytes("110KB", "x") == 110e3
    assert parse_bytes("2GiB", "x") == 2 * 2**30
    with pytest.raises(ConfigError, match=r"workload.tokens: expected a count"):
        parse_count("lots", "tokens")


def test_defaults_and_overrides() -> None:
    w = parse_workload({"kind": "qlora", "model": "llama-3-8b", "tokens": "1B"})
    assert (w.precision, w.lora_rank, w.checkpointing, w.sharding) == ("bf16", 64, "auto", "auto")
    w = parse_workload(
        {
            "kind": "finetune",
            "params": "8B",
            "tokens": 1e9,
            "checkpointing": True,
            "sharding": "fsdp",
        }
    )
    assert (w.checkpointing, w.sharding) == ("full", "zero3")
    w = parse_workload(
        {
            "kind": "train",
            "tokens": "1B",
            "arch": {"layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "kv_heads": 2},
        }
    )
    assert w.arch.kv_dim == 128
    flat = parse_workload(
        {
            "kind": "train",
            "tokens": "1B",
            "layers": 2,
            "hidden": 256,
            "heads": 4,
            "vocab": 1000,
            "kv_heads": 2,
        }
    )
    assert flat.arch == w.arch


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"model": "llama-3-8b"}, "workload: missing kind"),
        ({"kind": "pretrain", "model": "x"}, "workload.kind: expected one of"),
        ({"kind": "lora", "tokens": "1B"}, "workload: missing model, params or arch"),
        ({"kind": "finetune", "model": "llama-3-8b"}, "workload.tokens: required for kind"),
        (
            {"kind": "qlora", "model": "llama-3-8b", "tokens": "1B", "precision": "fp32"},
            "workload.precision: qlora keeps the base model in 4-bit",
        ),
        ({"kind": "inference", "model": "llama-3-8b"}, "needs requests"),
        (
            {"kind": "inference", "model": "llama-3-8b", "requests": 5, "optimizer": "adamw"},
            "workload.optimizer: only applies to training",
        ),
        (
            {"kind": "finetune", "model": "llama-3-8b", "tokens": "1B", "lora_rank": 8},
            "workload.lora_rank: only applies to kind: lora or qlora",
        ),
        ({"kind": "train", "params": "1B", "tokens": "1B", "seqlen": 5}, "workload: unknown key"),
        (
            {"kind": "train", "tokens": "1B", "arch": {"layers": 2, "hidden": 8}},
            "workload: architecture missing heads, vocab",
        ),
        (
            {"kind": "train", "tokens": "1B", "layers": 2, "hidden": 8, "heads": 2},
            "workload: architecture missing vocab",
        ),
        (
            {"kind": "train", "tokens": "1B", "model": "llama-3-8b", "layers": 2},
            "either model or an architecture",
        ),
        (
            {"kind": "train", "params": "1B", "tokens": "1B", "samples_per_s": 10},
            "workload.bytes_per_sample: required",
        ),
        (
            {"kind": "train", "params": "1B", "tokens": "1B", "micro_batch": 0},
            "workload.micro_batch: must be at least 1",
        ),
    ],
)
def test_bad_workloads_are_one_line_errors(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_workload(raw)
    assert "\n" not in str(err.value)


def test_layout_keys_are_auto_unless_pinned_and_frameworks_match_the_schema() -> None:
    from cloudgpu.planner.frameworks import framework_names
    from cloudgpu.spec.workload import FRAMEWORKS

    assert set(FRAMEWORKS) == {"auto", *framework_names()}
    base = {"kind": "train", "model": "llama-3-8b", "tokens": "1B"}
    auto = parse_workload(base)
    assert (auto.micro_batch, auto.grad_accum, auto.tensor_parallel) == (0, 0, 0)
    assert (auto.pipeline_parallel, auto.global_batch, auto.network_gbps) == (0, 0, 0.0)
    pinned = parse_workload(
        {
            **base,
            "framework": "megatron",
            "micro_batch": 4,
            "grad_accum": "auto",
            "tensor_parallel": 2,
            "pipeline_parallel": 2,
            "virtual_pipeline": 4,
            "context_parallel": 2,
            "global_batch": 512,
            "network_gbps": 3200,
        }
    )
    assert (pinned.framework, pinned.micro_batch, pinned.grad_accum) == ("megatron", 4, 0)
    assert (pinned.tensor_parallel, pinned.pipeline_parallel) == (2, 2)
    assert (pinned.virtual_pipeline, pinned.context_parallel, pinned.global_batch) == (4, 2, 512)
    assert pinned.network_gbps == 3200
    with pytest.raises(ConfigError, match=r"workload\.framework: .*training framework.*vllm"):
        parse_workload({**base, "framework": "vllm"})
    with pytest.raises(ConfigError, match=r"workload\.framework"):
        parse_workload(
            {"kind": "inference", "model": "llama-3-8b", "requests": 1, "framework": "fsdp"}
        )
    with pytest.raises(ConfigError, match="only applies to training"):
        parse_workload(
            {"kind": "inference", "model": "llama-3-8b", "requests": 1, "global_batch": 8}
        )
