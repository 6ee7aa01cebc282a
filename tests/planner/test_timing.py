"""The time model against REFERENCE.md section 4 and published training runs."""

from __future__ import annotations

import pytest

from cloudgpu.catalog import load_registry
from cloudgpu.planner.memory import Layout
from cloudgpu.planner.timing import (
    allreduce_s,
    default_mfu,
    infer_time,
    train_flops_per_token,
    train_time,
)
from cloudgpu.planner.workload import parse_workload

REG = load_registry()
H100 = REG.require("H100-SXM")


def _w(**kw: object) -> object:
    return parse_workload({"kind": "train", "model": "llama-3-8b", "tokens": "1B", **kw})


def test_six_n_per_token_and_eight_n_with_recompute() -> None:
    # Kaplan et al. / REFERENCE s4: 6*N per token, ~8*N with full recomputation.
    w = _w(seq_len=128)  # short context: the attention term is negligible
    n = w.arch.active_params
    assert train_flops_per_token(w, "none") / n == pytest.approx(6.0, rel=0.01)
    assert train_flops_per_token(w, "full") / n == pytest.approx(8.0, rel=0.01)


def test_lora_counts_frozen_forward_and_input_gradients() -> None:
    # Frozen base: forward 2N + input-gradient backward 2N, no weight gradients.
    w = parse_workload({"kind": "lora", "model": "llama-3-8b", "tokens": "1B", "seq_len": 128})
    n = w.arch.active_params
    assert train_flops_per_token(w, "none") / n == pytest.approx(4.0, rel=0.02)
    assert train_flops_per_token(w, "full") / n == pytest.approx(6.0, rel=0.02)


def test_moe_uses_active_parameters() -> None:
    w = parse_workload({"kind": "train", "model": "mixtral-8x7b", "tokens": "1B", "seq_len": 128})
    assert train_flops_per_token(w, "none") / 12.9e9 == pytest.approx(6.0, rel=0.03)


def test_framework_generation_and_width_set_the_efficiency() -> None:
    # data/frameworks.json: fsdp 0.706 on Ampere, 0.51 on Hopper; megatron 0.74 on Hopper;
    # size factor 1 / (1 + 2.6 x peak/bandwidth / hidden)
    a100 = REG.require("A100-80GB-SXM")
    w = _w()  # kind train: fsdp
    assert default_mfu(w, a100) == pytest.approx(0.706 / (1 + 2.6 * (312 / 2.039) / 4096))
    assert default_mfu(w, H100) == pytest.approx(0.51 / (1 + 2.6 * (989 / 3.35) / 4096))
    mega = _w(framework="megatron")
    assert default_mfu(mega, H100) / default_mfu(w, H100) == pytest.approx(0.74 / 0.51)
    small = parse_workload({"kind": "train", "params": "125M", "tokens": "1B"})
    assert default_mfu(small, a100) < 0.75 * default_mfu(w, a100)
    assert default_mfu(_w(mfu=0.5), H100) == 0.5


@pytest.mark.parametrize(
    ("bandwidth_gbs", "expected_s"),
    # REFERENCE s4: all-reducing 7B bf16 gradients over 8 GPUs: 0.068 s on NVLink4 (450
    # GB/s), 0.61 s across nodes at 400 Gb/s (50 GB/s), 9.8 s over 25 GbE (3.125 GB/s).
    [(450.0, 0.068), (50.0, 0.61), (3.125, 9.8)],
)
def test_ring_allreduce_reference_examples(bandwidth_gbs: float, expected_s: float) -> None:
    assert allreduce_s(7e9 * 2, 8, bandwidth_gbs) == pytest.approx(expected_s, rel=0.03)


def test_llama31_405b_gpu_hours_sanity_check() -> None:
    # Meta's Llama 3.1 model card: 405B trained on ~15.6T tokens with 30.84M H100
    # GPU-hours. REFERENCE s4: 6*N*D at 40% of 989 TFLOPS gives ~26.6M.
    w = parse_workload(
        {
            "kind": "train",
            "model": "llama-3.1-405b",
            "tokens": "15.6T",
            "seq_len": 8192,
            "mfu": 0.40,
        }
    )
    lay = Layout(8, 2048, sharding="zero3")
    t = train_time(w, lay, H100, network_gbps=3200)
    gpu_hours = t.compute_hours * lay.n_gpus
    assert gpu_hours == pytest.approx(30.84e6, rel=0.15)
    assert gpu_hours == pytest.approx(26.6e6, rel=0.10)
    assert t.scaling_efficiency > 0.95  # 400 GB/s per node hides ZeRO-3 behind compute


def test_seven_b_on_64_h100_for_1t_tokens_is_about_19_days() -> None:
    # REFERENCE s4 example: 7B on 1T tokens, 64 x H100 at 40% MFU = ~19 days.
    w = parse_workload(
        {
            "kind": "train",
            "params": "7B",
            "tokens": "1T",
            "seq_len": 512,
            "mfu": 0.40,
            "micro_batch": 8,
            "grad_accum": 8,
        }
    )
    t = train_time(
        w, Layout(8, 8, sharding="zero1", micro_batch=8, grad_accum=8), H100, network_gbps=3200
    )
    assert t.compute_hours / 24 == pytest.approx(19, rel=0.1)


def test_scaling_efficiency_falls_with_a_slow_network() -> None:
    w = _w(seq_len=2048, micro_batch=1)
    fast = train_time(w, Layout(8, 2), H100, network_gbps=3200).scaling_efficiency
    slow = train_time(w, Layout(8, 2), H100, network_gbps=25).scaling_efficiency
    one_node = train_time(w, Layout(8, 1), H100).scaling_efficiency
    assert slow < 0.5 < fast <= one_node <= 1.0


def test_pcie_scales_worse_than_nvlink() -> None:
    w = _w(seq_len=2048)
    nvlink = train_time(w, Layout(8, sharding="zero3"), H100).scaling_efficiency
    pcie = train_time(w, Layout(8, sharding="zero3"), REG.require("H100-PCIe"))
    assert pcie.scaling_efficiency < nvlink


def test_decode_is_memory_bandwidth_bound() -> None:
    # Decode at batch 1 reads every weight per token: tokens/s <= bandwidth / bytes.
    w = parse_workload(
        {"kind": "inference", "model": "llama-3.1-8b", "tokens": "1M", "seq_len": 2048}
    )
    t = infer_time(w, Layout(1, tensor_parallel=1, sharding="none"), H100)
    bound = 3.35e12 / (8.03e9 * 2)
    # vLLM's (default) share of HBM bandwidth, less the KV cache it also reads
    assert 0.55 * bound < t.tokens_per_s < 0.6 * bound
    big = parse_workload(
        {"kind": "inference", "model": "llama-3.1-8b", "tokens": "1M", "seq_len": 2048, "batch": 64}
    )
    assert infer_time(big, Layout(1, 1, 1, "none"), H100).tokens_per_s > 20 * t.tokens_per_s


def test_prefill_is_compute_bound() -> None:
    w = parse_workload(
        {
            "kind": "inference",
            "model": "llama-3.1-8b",
            "requests": 1000,
            "input_tokens": 4000,
            "output_tokens": 1,
        }
    )
    t = infer_time(w, Layout(1, 1, 1, "none"), H100)
    # dense 2N plus causal attention (at 0.45 of the dense rate) per prompt token, at the
    # framework's Hopper prefill efficiency times the size factor of hidden 4096
    attention = 2 * 32 * 4096 * 2000 / 0.45
    flops = (2 * 8.03e9 + attention) * 4000 * 1000
    rate = 989e12 * 0.53 / (1 + 2.6 * (989 / 3.35) / 4096)
    assert t.prefill_hours * 3600 == pytest.approx(flops / rate, rel=0.01)
    assert t.first_token_s == pytest.approx(t.prefill_hours * 3600 / 1000, rel=0.01)
