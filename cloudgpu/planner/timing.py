"""How long a workload takes on one machine shape: compute, communication, inference.

Formulas (REFERENCE.md section 4; framework factors in data/frameworks.json with their
sources; shared rules in cloudgpu/planner/frameworks.py):
- Training FLOPs per token: 6*N (forward 2N + backward 4N) for full training; 8*N with
  full recomputation (one more forward); torchtitan's selective op recomputation
  (memory.py) runs wk, wo and w3 again: + 2*layers*h*(kv + q + ffn). LoRA/QLoRA: the
  frozen base still runs its forward (2N) and the input-gradient half of its backward
  (2N), but no weight gradients, so 4*N (+ the recomputation) plus 6 x the adapter
  parameters. Attention adds
  6*layers*seq*q_dim per token (causal half of PaLM's 12*L*H*Q*T, arXiv:2204.02311 App. B).
  N is the *active* parameter count (MoE: routed experts only).
- Compute time = hardware FLOPs / (GPUs x peak x framework efficiency x size factor),
  attention FLOPs at ATTENTION_EFFICIENCY of the dense rate; fp8 at FP8_SPEEDUP x bf16.
  QLoRA's on-the-fly NF4 dequantization: x QLORA_FACTOR (LitGPT resource tables, LoRA vs
  nf4-dq time per 1k iterations on A100: 0.49-0.66 at 3-13B; torchtune README on an RTX
  4090: 2,413 vs 3,083 tokens/s = 0.78). A stated ``mfu`` replaces all of this: model
  FLOPs (no recomputation) at mfu x peak.
- Collectives: all-reduce of S bytes over n GPUs = 2(n-1)/n*S/B + latency(n), B = 0.8 x
  the link (nccl-tests PERFORMANCE.md: bus bandwidth ~80% of the link); NVLink/PCIe inside
  a node, min(link, node network) across nodes. latency(n) = 12 us + 6 us x log2(n):
  gpt-fast's tensor-parallel decode of Llama-2-7B (104.9 / 168.8 / 254.0 / 328.4 tokens/s
  on 1/2/4/8 A100) leaves 18, 24 and 29 us per all-reduce once the weights' read time is
  taken out (https://github.com/pytorch-labs/gpt-fast).
- A training step of ``grad_accum`` micro-batches on ``pp`` pipeline stages (1F1B) takes
  (grad_accum + pp - 1) micro-slots of compute (Narayanan et al. 2021: bubble (p-1)/m);
  tensor parallelism all-reduces activations 4 times per layer per micro-batch, not
  overlapped; ZeRO-3/FSDP all-gathers the weights twice and reduce-scatters the gradients
  every micro-batch (1.5x DDP's volume), overlapped with OVERLAP of its compute;
  DDP/ZeRO-1/2 all-reduce once per optimizer step, overlapped with OVERLAP of the last
  backward pass. Interleaving ``virtual_pipeline`` chunks per stage divides the bubble by
  that count and multiplies the stage-to-stage traffic by it (Narayanan et al. 2021
  s2.2.2). Context parallelism splits each sequence
  over ``context_parallel`` GPUs: compute and activations divide by it; per layer its
  ring passes every rank's K/V chunk round the other cp-1 ranks in the forward pass,
  and K/V plus their gradients in the backward (3x), overlapped with the attention
  those chunks feed (Megatron-Core context_parallel docs; Liu et al., Ring Attention,
  arXiv:2310.01889): only the part longer than that attention is charged. Scaling
  efficiency = compute / step. A stated ``mfu`` is end-to-end (as papers publish it):
  time = model FLOPs / (GPUs x peak x mfu), no communication charged on top.
- Inference: prefill is compute-bound (2*N + causal attention FLOPs per prompt token at the
  framework's prefill efficiency); a decode step reads the weights and the batch's KV
  cache at the framework's share of HBM bandwidth, or is compute-bound when the batch is
  large, plus the framework's per-layer host overhead and two tensor-parallel
  all-reduces per layer.

This module only computes durations from numbers passed in; it must not look up offers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from cloudgpu.planner.frameworks import (
    ATTENTION_EFFICIENCY,
    FP8_SPEEDUP,
    generation,
    resolve,
    size_factor,
)
from cloudgpu.planner.memory import (
    Layout,
    kv_bytes_per_value,
    kv_cache_bytes_per_token,
    recompute_share,
    stage_params,
    weights_bytes,
)
from cloudgpu.planner.workload import Workload

LINK_EFFICIENCY = 0.8
LATENCY_BASE_S = 12e-6
LATENCY_PER_DOUBLING_S = 6e-6
OVERLAP = 0.8  # share of the backward pass gradient communication can hide behind
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
    @property
    def architecture(self) -> str: ...


@dataclass(frozen=True)
class TrainTime:
    compute_hours: float  # wall-clock hours for all tokens, scaling included
    scaling_efficiency: float
    mfu: float  # model FLOPs utilisation the estimate implies (communication included)
    flops: float


@dataclass(frozen=True)
class InferTime:
    hours: float
    prefill_hours: float
    decode_hours: float
    tokens_per_s: float  # decode throughput of the whole machine
    first_token_s: float = 0.0  # one request's prompt pass alone


def peak_tflops(spec: GpuPerf, precision: str) -> float:
    """Dense datasheet peak at ``precision`` (int8/int4 weights compute in bf16)."""
    if precision == "fp8" and spec.fp8_tflops:
        return spec.fp8_tflops
    if precision == "fp32":
        return spec.fp32_tflops or spec.bf16_tflops / 8
    return spec.bf16_tflops


def train_peak(spec: GpuPerf, precision: str) -> float:
    """The training rate's peak: fp8 realises FP8_SPEEDUP x bf16, not the datasheet 2x."""
    if precision == "fp8" and spec.fp8_tflops:
        return spec.bf16_tflops * FP8_SPEEDUP
    return peak_tflops(spec, precision)


def default_mfu(w: Workload, spec: GpuPerf | None = None) -> float:
    """The compute efficiency the estimate uses on ``spec`` (the stated mfu if any)."""
    if w.mfu is not None:
        return w.mfu
    fw = resolve(w.framework, w.kind)
    gen = generation(spec.architecture) if spec is not None else "Ampere"
    eff = fw.train_efficiency(gen) if w.training else fw.prefill_efficiency(gen)
    if spec is not None:
        eff *= size_factor(spec.bf16_tflops, spec.memory_bw_tbs, w.arch.hidden)
    return eff * (QLORA_FACTOR if w.kind == "qlora" else 1.0)


def attention_flops_per_token(w: Workload) -> float:
    return 6.0 * w.arch.layers * w.seq_len * w.arch.q_dim


def recompute_flops_per_token(w: Workload, checkpointing: str, share: float = 1.0) -> float:
    """FLOPs the backward pass spends running forward work again (module docstring);
    ``share``: the part of the layers full checkpointing recomputes."""
    arch = w.arch
    if checkpointing == "full":
        return share * (2.0 * arch.active_params + attention_flops_per_token(w) / 3)
    if checkpointing == "selective" and resolve(w.framework, w.kind).selective == "op":
        inter = arch.intermediate * arch.experts_active
        return 2.0 * arch.layers * arch.hidden * (arch.kv_dim + arch.q_dim + inter)
    return 0.0


def train_flops_per_token(w: Workload, checkpointing: str, share: float = 1.0) -> float:
    """Model FLOPs per token (hardware FLOPs when ``checkpointing`` recomputes)."""
    arch = w.arch
    n = arch.active_params
    attention = attention_flops_per_token(w)
    recompute = recompute_flops_per_token(w, checkpointing, share)
    if w.adapters:
        adapters = arch.lora_params(w.lora_rank, w.lora_targets)
        return 4.0 * n + 6.0 * adapters + attention + recompute
    return 6.0 * n + attention + recompute


def _attention_work(w: Workload, checkpointing: str, share: float) -> float:
    return attention_flops_per_token(w) * (1 + share * (checkpointing == "full") / 3)


def _work_per_token(w: Workload, checkpointing: str, share: float = 1.0) -> float:
    """FLOPs weighted by the rate each runs at: attention at ATTENTION_EFFICIENCY of the
    dense rate; with a stated mfu, plain model FLOPs (the measurement includes it all)."""
    if w.mfu is not None:
        return train_flops_per_token(w, "none")
    attention = _attention_work(w, checkpointing, share)
    dense = train_flops_per_token(w, checkpointing, share)
    return dense + attention * (1 / ATTENTION_EFFICIENCY - 1)


def latency_s(n: int) -> float:
    return LATENCY_BASE_S + LATENCY_PER_DOUBLING_S * math.log2(max(n, 1))


def allreduce_s(size: float, n: int, bandwidth_gbs: float) -> float:
    """Ring all-reduce of ``size`` bytes over ``n`` ranks at ``bandwidth_gbs`` GB/s."""
    if n <= 1 or size <= 0:
        return 0.0
    bw = max(bandwidth_gbs, 1e-3) * LINK_EFFICIENCY * 1e9
    return 2.0 * (n - 1) / n * size / bw + latency_s(n)


def dp_bandwidth(spec: GpuPerf, lay: Layout, network_gbps: float) -> float:
    """GB/s per direction the data-parallel ring runs at (slowest hop)."""
    link = spec.link_gbps or 16.0
    nodes_per_stage = lay.num_nodes // max(1, lay.pipeline_parallel)
    if nodes_per_stage <= 1:
        return link
    return min(link, (network_gbps or DEFAULT_NETWORK_GBPS) / 8.0)


def context_parallel_s(
    w: Workload, lay: Layout, spec: GpuPerf, network_gbps: float, attention_s: float
) -> float:
    """Seconds of one micro-batch's K/V ring exchange not hidden behind its attention
    (``attention_s``, forward and backward, on this stage)."""
    cp, tp = lay.context_parallel, lay.tensor_parallel
    if cp <= 1:
        return 0.0
    act_b = 4.0 if w.precision == "fp32" else 2.0
    chunk = lay.micro_batch * w.seq_len / cp * 2 * w.arch.kv_dim * act_b / tp  # K and V
    inside = tp * cp <= lay.gpus_per_node
    link = spec.link_gbps or 16.0
    bw = link if inside else min(link, (network_gbps or DEFAULT_NETWORK_GBPS) / 8.0)
    ring = 3 * (cp - 1) * chunk / (max(bw, 1e-3) * LINK_EFFICIENCY * 1e9) + latency_s(cp)
    return max(0.0, w.arch.layers / lay.pipeline_parallel * ring - attention_s)


def _per_step_comm(
    w: Workload, lay: Layout, spec: GpuPerf, network_gbps: float, micro_s: float
) -> tuple[float, float]:
    """(seconds added to every micro-slot, seconds added once per optimizer step)."""
    arch, tp, pp = w.arch, lay.tensor_parallel, lay.pipeline_parallel
    act_b = 4.0 if w.precision == "fp32" else 2.0
    act = lay.micro_batch * w.seq_len * arch.hidden * act_b / lay.context_parallel
    per_micro = 4 * arch.layers / pp * allreduce_s(act, tp, spec.link_gbps or 16.0)
    share = recompute_share(arch.layers, lay)
    attention = _attention_work(w, lay.checkpointing, share)
    work = _work_per_token(w, lay.checkpointing, share)
    attention_s = micro_s * attention / ATTENTION_EFFICIENCY / work
    per_micro += context_parallel_s(w, lay, spec, network_gbps, attention_s)
    if pp > 1:  # activations forward and gradients back across each stage boundary
        hop = (network_gbps or DEFAULT_NETWORK_GBPS) / 8.0 if lay.num_nodes > 1 else spec.link_gbps
        hops = 2 * lay.virtual_pipeline  # each interleaved chunk sends and receives
        per_micro += hops * act / tp / (max(hop or 16.0, 1e-3) * LINK_EFFICIENCY * 1e9)
    dp = lay.dp * lay.context_parallel  # gradients are reduced over the CP ranks too
    if dp <= 1:
        return per_micro, 0.0
    total, emb = stage_params(arch, pp)
    trainable = arch.lora_params(w.lora_rank, w.lora_targets) / pp if w.adapters else total
    grads = trainable / tp * act_b
    bw = dp_bandwidth(spec, lay, network_gbps)
    if lay.sharding == "zero3":
        weights = weights_bytes(w, total / tp, emb / tp)
        z3 = allreduce_s(weights, dp, bw) + 0.5 * allreduce_s(grads, dp, bw)
        return per_micro + max(0.0, z3 - OVERLAP * micro_s), 0.0
    return per_micro, max(0.0, allreduce_s(grads, dp, bw) - OVERLAP * micro_s * 2.0 / 3.0)


def train_time(w: Workload, lay: Layout, spec: GpuPerf, network_gbps: float = 0.0) -> TrainTime:
    """Hours to train ``w.tokens`` tokens laid out as ``lay`` on GPUs like ``spec``."""
    network_gbps = w.network_gbps or network_gbps
    eff = default_mfu(w, spec)
    rate = train_peak(spec, w.precision) * 1e12 * eff  # FLOP/s of one GPU
    work = _work_per_token(w, lay.checkpointing, recompute_share(w.arch.layers, lay))
    tokens_micro = lay.micro_batch * w.seq_len
    split = lay.tensor_parallel * lay.pipeline_parallel * lay.context_parallel
    micro_s = work * tokens_micro / (rate * split)
    slot, once = _per_step_comm(w, lay, spec, network_gbps, micro_s)
    ga, pp = max(1, lay.grad_accum), lay.pipeline_parallel
    if w.mfu is not None:
        slot = once = 0.0  # a measured MFU already includes communication and bubbles
        pp = 1
    bubble = (pp - 1) / max(1, lay.virtual_pipeline)
    step = (ga + bubble) * (micro_s + slot) + once
    scaling = ga * micro_s / step
    tokens_step = ga * tokens_micro * lay.dp
    hours = w.tokens / tokens_step * step / 3600.0
    flops = train_flops_per_token(w, "none") * w.tokens
    implied = flops / (hours * 3600.0 * lay.n_gpus * peak_tflops(spec, w.precision) * 1e12)
    return TrainTime(compute_hours=hours, scaling_efficiency=scaling, mfu=implied, flops=flops)


def _prefill_rate(w: Workload, spec: GpuPerf, tp: int) -> float:
    """FLOP/s one replica's prompt pass runs at."""
    precision = "bf16" if w.precision in ("int8", "int4") else w.precision
    return peak_tflops(spec, precision) * 1e12 * default_mfu(w, spec) * tp


def prefill_s(w: Workload, tokens: float, context: float, spec: GpuPerf, tp: int) -> float:
    """Seconds for ``tokens`` prompt tokens whose attention spans ``context`` on average."""
    arch = w.arch
    dense = 2.0 * arch.active_params
    attention = 2.0 * arch.layers * arch.q_dim * context / ATTENTION_EFFICIENCY
    compute = tokens * (dense + attention) / _prefill_rate(w, spec, tp)
    act = tokens * arch.hidden * 2.0
    comm = 2 * arch.layers * allreduce_s(act, tp, spec.link_gbps or 16.0) if tp > 1 else 0.0
    return compute + comm


def decode_step_s(w: Workload, lay: Layout, spec: GpuPerf, context: float) -> float:
    """One decode step of ``lay.batch`` sequences averaging ``context`` tokens each."""
    arch, tp = w.arch, lay.tensor_parallel
    fw = resolve(w.framework, w.kind)
    b = lay.batch or w.batch or 1
    touched = min(arch.total_params, arch.active_params * b)  # MoE: experts the batch routes to
    emb = min(touched, arch.embedding_params())
    kv = kv_cache_bytes_per_token(arch, kv_bytes_per_value(w)) * context * b
    step_bytes = (weights_bytes(w, touched, emb) + kv) / tp
    mem_s = step_bytes / (spec.memory_bw_tbs * 1e12 * fw.decode_bandwidth)
    comp_s = 2.0 * arch.active_params * b / _prefill_rate(w, spec, tp)
    tp_s = 2 * arch.layers * allreduce_s(b * arch.hidden * 2.0, tp, spec.link_gbps or 16.0)
    # Kernels are launched asynchronously: the GPU's work and the host's per-layer launch
    # cost overlap, the slower one sets the pace (eager frameworks are launch-bound at
    # small batch: LitGPT's 7B and 13B, 31 and 25 tokens/s, are ~1 ms per layer).
    return max(max(mem_s, comp_s) + tp_s, arch.layers * fw.layer_overhead_s)


def infer_time(w: Workload, lay: Layout, spec: GpuPerf) -> InferTime:
    """Hours to serve the workload's requests (or generate its tokens) on ``lay``: each of
    its replicas (``lay.dp``) takes an equal share."""
    tp, replicas = lay.tensor_parallel, lay.dp
    if w.requests:
        prompt, out = w.requests * w.input_tokens, w.requests * w.output_tokens
        context = w.input_tokens + w.output_tokens / 2
        first = prefill_s(w, w.input_tokens, w.input_tokens / 2, spec, tp)
    else:
        prompt, out, context, first = 0.0, w.tokens, w.seq_len / 2, 0.0
    pre = prefill_s(w, prompt, w.input_tokens / 2, spec, tp) if prompt else 0.0
    b = lay.batch or w.batch or 1
    step = decode_step_s(w, lay, spec, context)
    decode = out / b * step
    return InferTime(
        hours=(pre + decode) / replicas / 3600.0,
        prefill_hours=pre / replicas / 3600.0,
        decode_hours=decode / replicas / 3600.0,
        tokens_per_s=b / step * replicas,
        first_token_s=first,
    )
