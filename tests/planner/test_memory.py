"""The memory model against published figures (each test cites its source)."""

from __future__ import annotations

import pytest

from cloudgpu.planner.memory import (
    GIB,
    Layout,
    activations,
    kv_cache_bytes_per_token,
    memory_breakdown,
    model_states,
    total_gib,
)
from cloudgpu.planner.models import lookup_model
from cloudgpu.planner.timing import train_flops_per_token
from cloudgpu.planner.workload import parse_workload


def _train(**kw: object) -> object:
    return parse_workload({"kind": "train", "params": "7.5B", "tokens": "1B", **kw})


def test_mixed_precision_adam_is_16_bytes_per_param() -> None:
    # ZeRO paper (arXiv:1910.02054) s3.1: 2 + 2 + 12 = 16 bytes per parameter.
    w = _train()
    states = model_states(w, Layout(1))
    assert sum(states.values()) / w.arch.total_params == pytest.approx(16.0)
    assert states == pytest.approx(
        {"weights": 2 * 7.5e9, "gradients": 2 * 7.5e9, "optimizer": 12 * 7.5e9}
    )


@pytest.mark.parametrize(
    ("stage", "per_param"),
    # ZeRO paper Figure 1 / REFERENCE s3: stage 1: 4P + 12P/N, stage 2: 2P + 14P/N,
    # stage 3: 16P/N; the paper's example: 7.5B params on 64 GPUs -> 120, 31.4, 16.6, 1.9 GB.
    [("ddp", 16.0), ("zero1", 4 + 12 / 64), ("zero2", 2 + 14 / 64), ("zero3", 16 / 64)],
)
def test_zero_stage_formulas(stage: str, per_param: float) -> None:
    w = _train()
    states = model_states(w, Layout(8, 8, sharding=stage))
    assert sum(states.values()) == pytest.approx(per_param * 7.5e9)


def test_zero_paper_example_in_gb() -> None:
    w = _train()
    got = [
        sum(model_states(w, Layout(8, 8, sharding=s)).values()) / 1e9
        for s in ("ddp", "zero1", "zero2", "zero3")
    ]
    assert got == pytest.approx([120, 31.4, 16.6, 1.9], abs=0.1)


def test_eight_bit_adam_and_sgd() -> None:
    # ml-engineering "Anatomy of Model's Memory Usage": 8-bit AdamW keeps 2 bytes of state,
    # SGD with momentum 4 (each plus the 4-byte fp32 master in mixed precision).
    w = _train()
    per = {
        opt: sum(model_states(w, Layout(1, optimizer=opt)).values()) / 7.5e9
        for opt in ("adamw", "adam8bit", "sgd", "sgd_nomomentum")
    }
    assert per == pytest.approx({"adamw": 16, "adam8bit": 10, "sgd": 12, "sgd_nomomentum": 8})


def test_qlora_65b_fits_48gb_where_16bit_finetune_needs_780gb() -> None:
    # QLoRA (arXiv:2305.14314) abstract: finetuning a 65B model drops from >780 GB of GPU
    # memory to <48 GB (NF4 base, LoRA r=64 on all linear layers, paged optimizer).
    qlora = parse_workload(
        {
            "kind": "qlora",
            "model": "llama-65b",
            "tokens": "1B",
            "seq_len": 512,
            "checkpointing": True,
        }
    )
    parts = memory_breakdown(qlora, Layout(1, checkpointing="full"))
    assert total_gib(parts) < 48
    # bitsandbytes quantizes the blocks' Linear layers only: embeddings and head stay bf16
    emb = 2 * 32000 * 8192
    assert parts["weights"] == pytest.approx((65.2e9 - emb) * 4.127 / 8 + emb * 2)
    full = parse_workload({"kind": "finetune", "model": "llama-65b", "tokens": "1B"})
    assert sum(model_states(full, Layout(1)).values()) / 1e9 > 780


def test_llama3_8b_32k_activations_with_and_without_checkpointing() -> None:
    # ml-engineering (training/performance, activation memory): Llama-3-8B at 32k context
    # keeps ~224 GiB of activations without checkpointing and ~8 GiB with it.
    w = parse_workload({"kind": "train", "model": "llama-3-8b", "tokens": "1B", "seq_len": 32768})
    without = activations(w, Layout(1))["activations"] / GIB
    with_ckpt = activations(w, Layout(1, checkpointing="full"))["activations"] / GIB
    assert without == pytest.approx(224, rel=0.10)
    assert with_ckpt == pytest.approx(8, rel=0.01)


def test_eager_attention_adds_the_quadratic_scores() -> None:
    # Korthikanti et al. (arXiv:2205.05198) eq. 1: 5*a*s^2*b bytes per layer for the
    # attention scores, which flash attention and selective recomputation drop.
    base = {"kind": "train", "model": "llama-3-8b", "tokens": "1B", "seq_len": 4096}
    flash = activations(parse_workload(base), Layout(1))["activations"]
    eager_w = parse_workload({**base, "attention": "eager"})
    eager = activations(eager_w, Layout(1))["activations"]
    assert eager - flash == pytest.approx(32 * 5 * 32 * 4096**2)
    # Megatron's selective recomputation is Korthikanti's: the core attention only.
    megatron = parse_workload({**base, "attention": "eager", "framework": "megatron"})
    selective = activations(megatron, Layout(1, checkpointing="selective"))["activations"]
    flash_megatron = activations(parse_workload({**base, "framework": "megatron"}), Layout(1))
    assert selective == pytest.approx(flash_megatron["activations"])


def test_torchtitan_selective_op_checkpointing_keeps_every_other_matmul() -> None:
    # torchtitan's SelectiveAC (fsdp): per Llama-3-8B block the input, wq, wv, the
    # attention output, w1 and w2 are kept: (2*4096 + 2*4096 + 1024 + 14336) x 2 bytes
    # per token; wk, wo and w3 run again in the backward pass.
    w = parse_workload({"kind": "train", "model": "llama-3-8b", "tokens": "1B", "seq_len": 8192})
    kept = activations(w, Layout(1, checkpointing="selective"))
    assert kept["activations"] == pytest.approx(32 * 8192 * 31744 * 2)
    assert kept["recompute_peak"] == activations(w, Layout(1))["activations"] / 32
    extra = train_flops_per_token(w, "selective") - train_flops_per_token(w, "none")
    assert extra == pytest.approx(2 * 32 * 4096 * (1024 + 4096 + 14336))


def test_llama31_8b_kv_cache_per_token() -> None:
    # REFERENCE s3: Llama-3.1-8B bf16 KV cache ~0.131 MB per token (2*32*8*128*2 bytes).
    assert kv_cache_bytes_per_token(lookup_model("llama-3.1-8b")) / 1e6 == pytest.approx(
        0.131, abs=0.001
    )


def test_tensor_parallel_with_sequence_parallelism_divides_states_and_activations() -> None:
    # Korthikanti et al. s4.2.2: with sequence parallelism every activation divides by t
    w = _train(seq_len=4096)
    one = memory_breakdown(w, Layout(1))
    tp4 = memory_breakdown(w, Layout(4, tensor_parallel=4))
    assert tp4["weights"] == pytest.approx(one["weights"] / 4)
    assert tp4["activations"] == pytest.approx(one["activations"] / 4)


def test_zero_stages_as_deepspeed_and_megatron_allocate() -> None:
    # DeepSpeed stage_1_and_2.py: ZeRO-2 = 2P + 18P/N (ZeRO-1 keeps the 16-bit gradients
    # whole: 4P + 16P/N); stage3.py: 18P/N. Megatron dist_optimizer.md: 18 bytes/param
    # without, 6 + 12/d with the distributed optimizer.
    def per_param(framework: str, sharding: str) -> float:
        w = _train(framework=framework)
        return sum(model_states(w, Layout(8, 8, sharding=sharding)).values()) / 7.5e9

    assert per_param("deepspeed", "zero1") == pytest.approx(4 + 16 / 64)
    assert per_param("deepspeed", "zero2") == pytest.approx(2 + 18 / 64)
    assert per_param("deepspeed", "zero3") == pytest.approx(18 / 64)
    assert per_param("megatron", "ddp") == pytest.approx(18)
    assert per_param("megatron", "zero1") == pytest.approx(6 + 12 / 64)


def test_logits_bytes_follow_the_framework() -> None:
    # Hugging Face models upcast and copy the logits (18 bytes per vocab entry per token);
    # torchtune's chunked loss keeps 4; torchtitan/Megatron 10.
    base = {"kind": "lora", "model": "llama-3.1-8b", "tokens": "1B", "seq_len": 8192}
    got = {
        fw: activations(parse_workload({**base, "framework": fw}), Layout(1))["logits"]
        for fw in ("hf-trainer", "torchtune", "fsdp")
    }
    per = 8192 * 128256
    assert got == pytest.approx({"hf-trainer": 18 * per, "torchtune": 4 * per, "fsdp": 10 * per})


def test_inference_memory_is_weights_kv_and_overhead() -> None:
    w = parse_workload(
        {
            "kind": "inference",
            "model": "llama-3.1-8b",
            "requests": 10,
            "batch": 8,
            "seq_len": 8192,
            "input_tokens": 100,
            "output_tokens": 100,
        }
    )
    parts = memory_breakdown(w, Layout(1, tensor_parallel=1, sharding="none"))
    assert parts["weights"] == pytest.approx(8.03e9 * 2)
    assert parts["kv_cache"] == pytest.approx(131072 * 8192 * 8)
    int4 = parse_workload(
        {"kind": "inference", "model": "llama-3.1-8b", "requests": 10, "precision": "int4"}
    )
    # int4 quantizes the blocks; embeddings and output head stay 16-bit (2 x 128256 x 4096)
    emb = 2 * 128256 * 4096
    int4_weights = memory_breakdown(int4, Layout(1, sharding="none"))["weights"]
    assert int4_weights == pytest.approx((8.03e9 - emb) * 4.127 / 8 + emb * 2)


def test_inference_context_is_prompt_plus_output_unless_stated() -> None:
    base = {
        "kind": "inference",
        "model": "llama-3.1-8b",
        "requests": 10,
        "batch": 4,
        "input_tokens": 1000,
        "output_tokens": 200,
    }
    lay = Layout(1, sharding="none")
    kv = memory_breakdown(parse_workload(base), lay)["kv_cache"]
    assert kv == pytest.approx(131072 * 1200 * 4)
    stated = memory_breakdown(parse_workload({**base, "seq_len": 8192}), lay)["kv_cache"]
    assert stated == pytest.approx(131072 * 8192 * 4)


def test_vllm_02_profiling_pass_holds_every_tensor_parallel_all_reduce() -> None:
    # vLLM <= 0.2 read free memory after one unchunked pass of max(max_model_len, 2048)
    # tokens, and at TP > 1 the pass's all-reduce outputs are not reused (vllm issue
    # #2150): Llama-2-70B at 4,096 tokens holds (2 x 80 + 1) x 4096 x 8192 x 2 bytes.
    base = {"kind": "inference", "model": "llama-2-70b", "seq_len": 4096, "requests": 256}
    old = parse_workload({**base, "framework": "vllm-0.2"})
    new = parse_workload({**base, "framework": "vllm"})
    tp4 = Layout(4, tensor_parallel=4, sharding="none", batch=256)
    held = memory_breakdown(old, tp4)["profile_allreduce"]
    assert held == pytest.approx(161 * 4096 * 8192 * 2.0)
    assert "profile_allreduce" not in memory_breakdown(new, tp4)
    tp1 = Layout(1, tensor_parallel=1, sharding="none", batch=256)
    assert "profile_allreduce" not in memory_breakdown(old, tp1)  # TP1 reuses it
