"""How long a workload takes on one machine shape: compute, communication, inference.

Formulas (REFERENCE.md section 4; each default overridable from the workload block):
- Training FLOPs per token: 6*N (forward 2N + backward 4N) for full training; 8*N with
  full recomputation (one more forward). LoRA/QLoRA: the frozen base still runs its
  forward (2N) and the input-gradient half of its backward (2N), but no weight gradients,
  so 4*N (+2N with recomputation) plus 6 x the adapter parameters. Attention adds
  6*layers*seq*q_dim per token (causal half of PaLM's 12*L*H*Q*T, arXiv:2204.02311 App. B).
  N is the *active* parameter count (MoE: routed experts only).
- Time = FLOPs / (GPUs x peak dense TFLOPS at the job's precision x MFU) / scaling.
  MFU defaults (compute efficiency before communication, which the scaling model charges
  separately): 0.45 for dense models >= 3B (Megatron-LM 41.5-56.3% on A100,
  arXiv:2104.04473; Megatron-Core up to 47% on H100), 0.35 for 1-3B and 0.25 below 1B
  (small matmuls cannot fill the GPU), 0.30 for MoE (REFERENCE: 0.25-0.35). QLoRA's
  on-the-fly NF4 dequantization is charged as a 0.7 factor (assumption: QLoRA is commonly
  reported ~30% slower than 16-bit LoRA).
- Scaling: ring all-reduce of S bytes over n GPUs takes 2(n-1)/n*S/B + 2(n-1)*alpha, with
  B = 0.8 x the link (nccl-tests PERFORMANCE.md: bus bandwidth ~80% of the link), the
  NVLink/PCIe link inside a node and min(link, node network) across nodes; ZeRO-3 moves
  1.5x the DDP volume each micro-step; DDP/ZeRO-1/2 all-reduce once per optimizer step,
  overlapped with 80% of the last backward pass; tensor parallelism all-reduces
  activations 4 times per layer per micro-step, not overlapped.
  step = compute + max(0, comm - overlap*backward); efficiency = compute / step.
- Inference: prefill is compute-bound (2*N FLOPs per prompt token at the MFU above);
  decode is memory-bandwidth-bound: each step reads the weights and the batch's KV cache
  at 70% of peak bandwidth (assumption: serving engines reach 60-80% of HBM bandwidth),
  or is compute-bound when the batch is large enough.

This module only computes durations from numbers passed in; it must not look up offers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cloudgpu.planner.memory import Layout, kv_cache_bytes_per_token, weight_bytes_per_param
from cloudgpu.planner.workload import Workload

LINK_EFFICIENCY = 0.8
ALPHA_S = 10e-6  # per-hop latency of a collective (nccl-tests: ~5-10 us)
OVERLAP = 0.8  # share of the backward pass gradient communication can hide behind
MBU = 0.7  # achieved share of HBM bandwidth during decode (assumption)
QLORA_FACTOR = 0.7
DEFAULT_NETWORK_GBPS = 100.0  # Gbit/s per node when the offer does not say (assumption)


class GpuPerf(Protocol):
    """What the time model needs from a GPU spec (cloudgpu.catalog's GpuSpec has it)."""

    @property
    def bf16_tflops(self) -> float: ...
    @property
    def fp8_tflops(self) -> float | None: ...
    @property
    def fp32_tflops(self) -> float: ...
    @property
    def memory_bw_tbs(self) -> float: ...
    @property
    def link_gbps(self) -> float: ...


@dataclass(frozen=True)
class TrainTime:
    compute_hours: float  # wall-clock hours for all tokens, scaling included
    scaling_efficiency: float
    mfu: float
    flops: float


@dataclass(frozen=True)
class InferTime:
    hours: float
    prefill_hours: float
    decode_hours: float
    tokens_per_s: float  # decode throughput of the whole machine


def peak_tflops(spec: GpuPerf, precision: str) -> float:
    if precision == "fp8" and spec.fp8_tflops:
        return spec.fp8_tflops
    if precision == "fp32":
        return spec.fp32_tflops or spec.bf16_tflops / 8
    return spec.bf16_tflops


def default_mfu(w: Workload) -> float:
    if w.mfu is not None:
        return w.mfu
    n = w.arch.active_params
    if w.arch.experts > 1:
        base = 0.30
    elif n < 1e9:
        base = 0.25
    elif n < 3e9:
        base = 0.35
    else:
        base = 0.45
    return base * (QLORA_FACTOR if w.kind == "qlora" else 1.0)


def train_flops_per_token(w: Workload, checkpointing: str) -> float:
    arch = w.arch
    n = arch.active_params
    attention = 6.0 * arch.layers * w.seq_len * arch.q_dim
    recompute = 1.0 if checkpointing == "full" else 0.0
    if w.adapters:
        adapters = arch.lora_params(w.lora_rank, w.lora_targets)
        return (4.0 + 2.0 * recompute) * n + 6.0 * adapters + attention * (1 + recompute / 3)
    return (6.0 + 2.0 * recompute) * n + attention * (1 + recompute / 3)


def allreduce_s(size: float, n: int, bandwidth_gbs: float) -> float:
    """Ring all-reduce of ``size`` bytes over ``n`` ranks at ``bandwidth_gbs`` GB/s."""
    if n <= 1 or size <= 0:
        return 0.0
    bw = max(bandwidth_gbs, 1e-3) * LINK_EFFICIENCY * 1e9
    return 2.0 * (n - 1) / n * size / bw + 2.0 * (n - 1) * ALPHA_S


def dp_bandwidth(spec: GpuPerf, lay: Layout, network_gbps: float) -> float:
    """GB/s per direction the data-parallel ring runs at (slowest hop)."""
    link = spec.link_gbps or 16.0
    if lay.num_nodes <= 1:
        return link
    return min(link, (network_gbps or DEFAULT_NETWORK_GBPS) / 8.0)


def step_efficiency(
    w: Workload, lay: Layout, spec: GpuPerf, network_gbps: float, micro_compute_s: float
) -> float:
    """Compute time / step time for one optimizer step (see module docstring)."""
    if lay.n_gpus <= 1:
        return 1.0
    arch, tp = w.arch, lay.tensor_parallel
    grad_b = 4.0 if w.precision == "fp32" else 2.0
    trainable = arch.lora_params(w.lora_rank, w.lora_targets) if w.adapters else arch.total_params
    grads = trainable / tp * grad_b
    ar = allreduce_s(grads, lay.dp, dp_bandwidth(spec, lay, network_gbps))
    tp_comm = 0.0
    if tp > 1:
        act = w.micro_batch * w.seq_len * arch.hidden * grad_b
        tp_comm = 4 * arch.layers * allreduce_s(act, tp, spec.link_gbps or 16.0)
    ga, c = w.grad_accum, micro_compute_s
    backward = c * (2.0 / 3.0)
    if lay.sharding == "zero3":
        # two all-gathers of the weights (forward, backward) + a reduce-scatter of the
        # gradients, each half an all-reduce: 1.5x DDP's volume for full training.
        bw = dp_bandwidth(spec, lay, network_gbps)
        weights = arch.total_params / tp * weight_bytes_per_param(w)
        z3 = allreduce_s(weights, lay.dp, bw) + 0.5 * allreduce_s(grads, lay.dp, bw)
        step = ga * (c + tp_comm + max(0.0, z3 - OVERLAP * c))
    else:
        step = ga * (c + tp_comm) + max(0.0, ar - OVERLAP * backward)
    return (ga * c) / step if step > 0 else 1.0


def train_time(w: Workload, lay: Layout, spec: GpuPerf, network_gbps: float = 0.0) -> TrainTime:
    """Hours to train ``w.tokens`` tokens laid out as ``lay`` on GPUs like ``spec``."""
    mfu = default_mfu(w)
    flops_tok = train_flops_per_token(w, lay.checkpointing)
    per_gpu = peak_tflops(spec, w.precision) * 1e12 * mfu
    tokens_micro = w.micro_batch * w.seq_len
    micro_compute_s = flops_tok * tokens_micro / (per_gpu * lay.tensor_parallel)
    eff = step_efficiency(w, lay, spec, network_gbps, micro_compute_s)
    flops = flops_tok * w.tokens
    hours = flops / (per_gpu * lay.n_gpus) / eff / 3600.0
    return TrainTime(compute_hours=hours, scaling_efficiency=eff, mfu=mfu, flops=flops)


def infer_time(w: Workload, lay: Layout, spec: GpuPerf) -> InferTime:
    """Hours to serve the workload's requests (or generate its tokens) on one machine."""
    arch, n = w.arch, lay.tensor_parallel
    mfu = default_mfu(w)
    compute = peak_tflops(spec, "bf16" if w.precision in ("int8", "int4") else w.precision)
    flops_s = compute * 1e12 * mfu * n
    if w.requests:
        prompt_tokens, out_tokens = w.requests * w.input_tokens, w.requests * w.output_tokens
        context = w.input_tokens + w.output_tokens / 2
    else:
        prompt_tokens, out_tokens, context = 0.0, w.tokens, w.seq_len / 2
    prefill_s = 2.0 * arch.active_params * prompt_tokens / flops_s
    b = lay.batch or w.batch or 1
    touched = min(arch.total_params, arch.active_params * b)  # MoE: experts the batch routes to
    kv_b = 1.0 if w.precision == "fp8" else 2.0
    step_bytes = touched * weight_bytes_per_param(w) + kv_cache_bytes_per_token(arch, kv_b) * (
        context * b
    )
    mem_s = step_bytes / (spec.memory_bw_tbs * 1e12 * MBU * n)
    comp_s = 2.0 * arch.active_params * b / flops_s
    tp_s = 2 * arch.layers * allreduce_s(b * arch.hidden * 2.0, n, spec.link_gbps or 16.0)
    step_s = max(mem_s, comp_s) + tp_s
    decode_s = out_tokens / b * step_s
    return InferTime(
        hours=(prefill_s + decode_s) / 3600.0,
        prefill_hours=prefill_s / 3600.0,
        decode_hours=decode_s / 3600.0,
        tokens_per_s=b / step_s,
    )
