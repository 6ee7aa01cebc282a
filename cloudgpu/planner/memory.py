"""GPU memory a workload needs, per GPU, broken down by component (bytes).

Sources of the formulas (every constant below is a default the job can change through
its workload block):
- Model states per parameter, mixed-precision Adam = 2 weights + 2 gradients + 12
  optimizer (fp32 master, momentum, variance) = 16 bytes; ZeRO stage 1/2/3 shard the
  optimizer / + gradients / + weights over the data-parallel GPUs (ZeRO, arXiv:1910.02054).
  8-bit Adam keeps 2 bytes of state instead of 8 (bitsandbytes; ml-engineering "Anatomy
  of Model's Memory Usage").
- QLoRA: the frozen base in NF4 with double quantization costs 4.127 bits per parameter;
  adapters train in 16-bit with fp32 Adam, ~16 bytes per trainable parameter
  (arXiv:2305.14314).
- Activations: Korthikanti et al. (arXiv:2205.05198) count what autograd keeps per layer,
  tensor by tensor (34*s*b*h for their GPT layer, plus 5*a*s^2*b for the attention
  scores that flash attention or selective recomputation drop). We apply the same
  per-tensor accounting to a Llama-style layer as PyTorch eager keeps it: two RMSNorms
  (fp32 upcast + normalized output), q/k/v with GQA, RoPE copies, attention output,
  a gated MLP (gate, act, up, product) -- 52*s*b*h for Llama-3-8B, close to the ~28 bf16
  hidden-state copies per layer ml-engineering measured (224 GiB at 32k). Full
  recomputation keeps only each layer's input (2*s*b*h) plus one live layer.
  Tensor parallelism (no sequence parallelism) divides all but the norm inputs by t.
- Logits: bf16 logits plus the fp32 copy the loss makes, 6*b*s*vocab (REFERENCE: 4-6).
- Runtime overhead: CUDA context and kernels ~1 GiB, torch.distributed ~1 GiB more when
  more than one GPU (ml-engineering "Additional GPU memory usage").

This module computes bytes only; it must not pick offers or estimate time.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudgpu.planner.models import ModelArch
from cloudgpu.planner.workload import Workload

GIB = float(2**30)
NF4_BYTES = 4.127 / 8  # QLoRA NF4 + double-quantized constants, bits per parameter / 8
ADAPTER_BYTES = 16.0  # per trainable adapter parameter: weights, grads, fp32 Adam states
CUDA_CONTEXT = 1.0 * GIB
DISTRIBUTED = 1.0 * GIB


@dataclass(frozen=True)
class Layout:
    """How a job is spread over GPUs: the choices the planner makes per machine shape."""

    gpus_per_node: int
    num_nodes: int = 1
    tensor_parallel: int = 1
    sharding: str = "ddp"  # ddp | zero1 | zero2 | zero3 | none (inference)
    checkpointing: str = "none"  # none | selective | full
    optimizer: str = "adamw"
    batch: int = 0  # inference: concurrent sequences (0: the workload's own)

    @property
    def n_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def dp(self) -> int:
        return max(1, self.n_gpus // self.tensor_parallel)

    def describe(self) -> str:
        parts = []
        if self.n_gpus > 1 and self.sharding != "none":
            parts.append(
                {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}[
                    self.sharding
                ]
            )
        if self.tensor_parallel > 1:
            parts.append(f"TP={self.tensor_parallel}")
        if self.checkpointing != "none":
            parts.append(f"{self.checkpointing} checkpointing")
        if self.optimizer == "adam8bit":
            parts.append("8-bit Adam")
        if self.batch:
            parts.append(f"batch {self.batch}")
        return ", ".join(parts)


def weight_bytes_per_param(w: Workload) -> float:
    """Bytes of one frozen or trained weight at the job's precision."""
    if w.kind == "qlora" or w.precision == "int4":
        return NF4_BYTES
    return {"fp32": 4.0, "fp8": 1.0 if not w.training else 2.0, "int8": 1.0}.get(w.precision, 2.0)


def optimizer_bytes_per_param(optimizer: str, precision: str) -> float:
    """Optimizer state per trained parameter; mixed precision adds a 4-byte fp32 master."""
    states = {"adamw": 8.0, "adam": 8.0, "adam8bit": 2.0, "sgd": 4.0, "sgd_nomomentum": 0.0}
    master = 0.0 if precision == "fp32" else 4.0
    return states[optimizer] + master


def model_states(w: Workload, lay: Layout) -> dict[str, float]:
    """Weights, gradients, optimizer (and adapters) per GPU after TP and ZeRO sharding."""
    p = w.arch.total_params / lay.tensor_parallel
    n = lay.dp
    wb = weight_bytes_per_param(w)
    shard_w = n if lay.sharding == "zero3" else 1
    if not w.training:
        return {"weights": p * wb}
    if w.adapters:
        adapters = w.arch.lora_params(w.lora_rank, w.lora_targets) / lay.tensor_parallel
        return {"weights": p * wb / shard_w, "adapters": adapters * ADAPTER_BYTES}
    grad_b = 4.0 if w.precision == "fp32" else 2.0
    shard_g = n if lay.sharding in ("zero2", "zero3") else 1
    shard_o = n if lay.sharding in ("zero1", "zero2", "zero3") else 1
    opt = optimizer_bytes_per_param(lay.optimizer, w.precision)
    return {
        "weights": p * wb / shard_w,
        "gradients": p * grad_b / shard_g,
        "optimizer": p * opt / shard_o,
    }


def layer_activation_bytes(arch: ModelArch, w: Workload, tp: int, attention: str) -> float:
    """What autograd keeps for one layer of one micro-batch (see module docstring)."""
    s, b, h = w.seq_len, w.micro_batch, arch.hidden
    a = 4.0 if w.precision == "fp32" else 2.0
    inter = arch.intermediate * arch.experts_active
    norms = 2 * h * (4.0 + a)  # two RMSNorms: fp32 upcast of the input + normalized output
    qkv = (arch.q_dim + 2 * arch.kv_dim) * a
    rope = 2 * (arch.q_dim + arch.kv_dim) * a  # rotate_half copies and rotated q/k
    attn_out = 2 * arch.q_dim * a  # attention output and the o_proj input copy
    mlp = 4 * inter * a  # gate, activation, up, product
    per_token = norms + (qkv + rope + attn_out + mlp) / tp
    scores = 5.0 * arch.heads * s * s * b / tp if attention == "eager" else 0.0
    return s * b * per_token + scores


def activations(w: Workload, lay: Layout) -> dict[str, float]:
    """Activation memory of one micro-batch per GPU, by recomputation mode."""
    arch, tp = w.arch, lay.tensor_parallel
    if not w.training:
        return {}
    attention = "flash" if lay.checkpointing == "selective" else w.attention
    per_layer = layer_activation_bytes(arch, w, tp, attention)
    a = 4.0 if w.precision == "fp32" else 2.0
    logits = w.micro_batch * w.seq_len * arch.vocab * (a + 4.0) / tp
    if lay.checkpointing == "full":
        inputs = arch.layers * w.seq_len * w.micro_batch * arch.hidden * a
        return {"activations": inputs, "recompute_peak": per_layer, "logits": logits}
    return {"activations": arch.layers * per_layer, "logits": logits}


def kv_cache_bytes_per_token(arch: ModelArch, bytes_per_value: float = 2.0) -> float:
    """2 (K and V) x layers x kv_heads x head_dim x bytes."""
    return 2.0 * arch.layers * arch.kv_dim * bytes_per_value


def inference_context(w: Workload) -> int:
    """Tokens one sequence holds at its longest: the stated context (seq_len) or, when
    only requests are given, their prompt plus output."""
    if "seq_len" in w.explicit or not w.requests:
        return w.seq_len
    return w.input_tokens + w.output_tokens


def inference_extras(w: Workload, lay: Layout) -> dict[str, float]:
    """KV cache for ``batch`` sequences at full context, prefill workspace, last logits."""
    arch, tp = w.arch, lay.tensor_parallel
    kv_b = 1.0 if w.precision == "fp8" else 2.0
    context = inference_context(w)
    batch = lay.batch or w.batch or 1
    kv = kv_cache_bytes_per_token(arch, kv_b) * context * batch / tp
    chunk = min(batch * context, 8192)  # chunked prefill bounds one layer's transients
    work = chunk * (4 * arch.hidden + 3 * arch.intermediate * arch.experts_active) * 2.0 / tp
    return {"kv_cache": kv, "workspace": work, "logits": batch * arch.vocab * 4.0}


def memory_breakdown(w: Workload, lay: Layout) -> dict[str, float]:
    """Bytes per GPU by component for ``w`` laid out as ``lay``."""
    parts = model_states(w, lay)
    if w.training:
        parts.update(activations(w, lay))
        if lay.sharding == "zero3" and lay.dp > 1:
            # ZeRO-3 gathers whole layers before use and prefetches the next one.
            parts["zero3_buffers"] = 2 * w.arch.layer_params() / lay.tensor_parallel * 2.0
    else:
        parts.update(inference_extras(w, lay))
    parts["overhead"] = CUDA_CONTEXT + (DISTRIBUTED if lay.n_gpus > 1 else 0.0)
    return parts


def total_gib(parts: dict[str, float]) -> float:
    return sum(parts.values()) / GIB
