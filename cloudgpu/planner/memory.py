"""GPU memory a workload needs, per GPU, broken down by component (bytes).

Sources of the formulas (every constant below is a default the job can change through
its workload block; framework-specific figures live in data/frameworks.json):
- Model states per parameter, mixed-precision Adam: 16-bit weights (2), gradients at the
  framework's width (2; Megatron keeps fp32 main gradients, 4), fp32 master weights (4),
  momentum and variance (8). ZeRO stage 1/2/3 shard the optimizer / + gradients / +
  weights over the data-parallel GPUs (ZeRO, arXiv:1910.02054). DeepSpeed also keeps an
  fp32 copy of its gradient partition: 4P + 16P/N at stage 1, 2P + 18P/N at stage 2,
  18P/N at stage 3 (its own estimators in stage_1_and_2.py / stage3.py); Megatron's
  distributed optimizer 6 + 12/d (dist_optimizer.md). 8-bit Adam keeps 2 bytes of state
  instead of 8 (bitsandbytes; ml-engineering "Anatomy of Model's Memory Usage").
- Pipeline parallelism gives each stage layers/pp of the blocks plus the embedding or
  the output head; with 1F1B the first stage holds min(pp, micro-steps) micro-batches of
  activations (Narayanan et al., arXiv:2104.04473 s2.2), and 1 + (pp-1)/(pp*v) times
  that with v interleaved chunks per stage (Korthikanti et al., arXiv:2205.05198 s4.2.3).
- QLoRA: the frozen base in NF4 with double quantization costs 4.127 bits per parameter
  (arXiv:2305.14314), but bitsandbytes quantizes only nn.Linear layers inside the blocks:
  the embeddings and the output head stay 16-bit (transformers' BitsAndBytesConfig keeps
  `lm_head` in its dtype by default; nn.Embedding is not a Linear). The same holds for
  int8/int4 inference. Adapters train in 16-bit with fp32 Adam: ~16 bytes per trainable
  parameter.
- Activations: Korthikanti et al. (arXiv:2205.05198) count what autograd keeps per layer,
  tensor by tensor (34*s*b*h for their GPT layer, plus 5*a*s^2*b for the attention
  scores that flash attention or selective recomputation drop). We apply the same
  per-tensor accounting to a Llama-style layer as PyTorch eager keeps it, checked
  against autograd's own saved tensors (tests/planner/test_activations.py): two
  RMSNorms (the fp32 upcast, the normalized value and the weighted output: 4 + 2a
  bytes), the attention's q, k and v (k and v expanded to every head where the
  framework repeats them for GQA), its output (also the output projection's input),
  and a gated MLP (gate, activation, up, product); RoPE multiplies by constants and
  keeps nothing. 52*s*b*h bytes for Llama-3-8B with repeated k/v, 49 without, close to
  the ~28 bf16 hidden-state copies per layer ml-engineering measured (224 GiB at 32k).
  A frozen base (LoRA, QLoRA) is charged as if trained: autograd would keep less (no
  matmul input for a weight gradient: 34*h for that layer), but LitGPT's measured LoRA
  and QLoRA peaks, the only published figures without recomputation, are 6-27% above
  that and within 10% of the trained accounting, so the safer figure is kept. Adapters
  with input dropout (LitGPT's default 0.05) add a mask (1 byte) and a dropped copy of
  each input they read (one for LitGPT's fused q/k/v, one per other matrix).
  Full recomputation keeps only each layer's input (2*s*b*h) plus one live layer.
  Selective recomputation as torchtitan does it ("op" in data/frameworks.json;
  torchtitan/distributed/activation_checkpoint.py SelectiveAC, the 2024 _save_list in
  parallelisms/parallelize_llama.py) keeps each block's input and the outputs of its
  matmuls and attention except every second matmul: in a Llama block wq, wv, the
  attention output, w1 and w2 are kept (h + 2q + kv + ffn + h values per token), wk, wo
  and w3 are recomputed with the norms, RoPE and activations, plus one live layer.
  Tensor parallelism is taken with sequence parallelism (Megatron-Core and torchtitan
  enable it with TP; Korthikanti et al. s4.2.2), which divides every activation by t.
- Logits: the framework's bytes per vocabulary entry per token (the loss upcasts to fp32
  and keeps more copies: 10 bytes in Megatron/torchtitan, 16 in Hugging Face models).
- Runtime overhead: CUDA context and kernels ~1 GiB, torch.distributed ~1 GiB more when
  more than one GPU (ml-engineering "Additional GPU memory usage"); serving engines: the
  non-torch memory vLLM measures (1.79 GiB at TP1, 3.58 GiB at TP2), and only their
  memory_fraction of the GPU is theirs to fill.

This module computes bytes only; it must not pick offers or estimate time.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudgpu.planner.frameworks import resolve
from cloudgpu.planner.models import ModelArch
from cloudgpu.planner.workload import Workload

GIB = float(2**30)
NF4_BYTES = 4.127 / 8  # QLoRA NF4 + double-quantized constants, bits per parameter / 8
ADAPTER_BYTES = 16.0  # per trainable adapter parameter: weights, grads, fp32 Adam states
CUDA_CONTEXT = 1.0 * GIB
DISTRIBUTED = 1.0 * GIB
SHARDING_NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}


@dataclass(frozen=True)
class Layout:
    """How a job is spread over GPUs: the choices the planner makes per machine shape."""

    gpus_per_node: int
    num_nodes: int = 1
    tensor_parallel: int = 1
    sharding: str = "ddp"  # ddp | zero1 | zero2 | zero3 | none (inference)
    checkpointing: str = "none"  # none | selective | full
    optimizer: str = "adamw"
    batch: int = 0  # inference: concurrent sequences per replica (0: the workload's own)
    pipeline_parallel: int = 1
    micro_batch: int = 1
    grad_accum: int = 1
    context_parallel: int = 1  # each sequence split over this many GPUs (ring attention)
    virtual_pipeline: int = 1  # interleaved 1F1B: model chunks per pipeline stage
    # Under full checkpointing, how many layers of each model chunk are recomputed
    # (Megatron's --recompute-method block); 0: all of them.
    recompute_layers: int = 0

    @property
    def n_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def dp(self) -> int:
        """Data-parallel ranks (training) or model replicas (inference)."""
        split = self.tensor_parallel * self.pipeline_parallel * self.context_parallel
        return max(1, self.n_gpus // split)

    def describe(self) -> str:
        parts = []
        if self.sharding != "none":
            if self.dp > 1:
                parts.append(SHARDING_NAMES[self.sharding])
        elif self.dp > 1:
            parts.append(f"{self.dp} replicas")
        if self.tensor_parallel > 1:
            parts.append(f"TP={self.tensor_parallel}")
        if self.pipeline_parallel > 1:
            vp = self.virtual_pipeline
            parts.append(f"PP={self.pipeline_parallel}" + (f" x{vp} interleaved" if vp > 1 else ""))
        if self.context_parallel > 1:
            parts.append(f"CP={self.context_parallel}")
        if self.sharding != "none":
            accum = f" x {self.grad_accum} accum" if self.grad_accum > 1 else ""
            parts.append(f"micro-batch {self.micro_batch}{accum}")
        if self.recompute_layers and self.checkpointing == "full":
            n = self.recompute_layers
            parts.append(f"recompute {n} layer{'s' if n > 1 else ''} per chunk")
        elif self.checkpointing != "none":
            parts.append(f"{self.checkpointing} checkpointing")
        if self.optimizer == "adam8bit":
            parts.append("8-bit Adam")
        if self.batch:
            parts.append(f"batch {self.batch}")
        return ", ".join(parts)


def weight_bytes_per_param(w: Workload) -> float:
    """Bytes of one frozen or trained weight inside the transformer blocks."""
    if w.kind == "qlora" or w.precision == "int4":
        return NF4_BYTES
    return {"fp32": 4.0, "fp8": 1.0 if not w.training else 2.0, "int8": 1.0}.get(w.precision, 2.0)


def weights_bytes(w: Workload, params: float, embedding: float) -> float:
    """Weights of ``params`` parameters of which ``embedding`` are embeddings/output head:
    those stay 16-bit under 4/8-bit quantization (module docstring)."""
    wb = weight_bytes_per_param(w)
    if wb >= 2.0:
        return params * wb
    return (params - embedding) * wb + embedding * 2.0


def optimizer_bytes_per_param(optimizer: str, precision: str) -> float:
    """Optimizer state per trained parameter; mixed precision adds a 4-byte fp32 master."""
    states = {"adamw": 8.0, "adam": 8.0, "adam8bit": 2.0, "sgd": 4.0, "sgd_nomomentum": 0.0}
    master = 0.0 if precision == "fp32" else 4.0
    return states[optimizer] + master


def stage_params(arch: ModelArch, pp: int) -> tuple[float, float]:
    """(parameters, of which embedding/head) held by the largest pipeline stage."""
    emb = arch.embedding_params()
    if pp <= 1:
        return arch.total_params, emb
    one_side = float(arch.vocab * arch.hidden)
    return (arch.total_params - emb) / pp + one_side, one_side


def model_states(w: Workload, lay: Layout) -> dict[str, float]:
    """Weights, gradients, optimizer (and adapters) per GPU after TP, PP and ZeRO."""
    fw = resolve(w.framework, w.kind)
    tp = lay.tensor_parallel
    total, emb = stage_params(w.arch, lay.pipeline_parallel)
    p, emb = total / tp, emb / tp
    n = lay.dp
    if not w.training:
        return {"weights": weights_bytes(w, p, emb)}
    shard_w = n if lay.sharding == "zero3" else 1
    if w.adapters:
        adapters = w.arch.lora_params(w.lora_rank, w.lora_targets) / tp / lay.pipeline_parallel
        return {"weights": weights_bytes(w, p, emb) / shard_w, "adapters": adapters * ADAPTER_BYTES}
    grad_b = 4.0 if w.precision == "fp32" else fw.grad_bytes
    shard_g = n if lay.sharding in ("zero2", "zero3") else 1
    shard_o = n if lay.sharding in ("zero1", "zero2", "zero3") else 1
    opt = optimizer_bytes_per_param(lay.optimizer, w.precision)
    if fw.fp32_grad_partition and lay.sharding != "ddp" and w.precision != "fp32":
        opt += 4.0  # DeepSpeed's fp32 gradient partition
        if lay.sharding == "zero3":
            grad_b = 0.0  # stage 3 reduce-scatters straight into it (18P/N in all)
    return {
        "weights": p * weight_bytes_per_param(w) / shard_w,
        "gradients": p * grad_b / shard_g,
        "optimizer": p * opt / shard_o,
    }


def layer_activation_bytes(arch: ModelArch, w: Workload, lay: Layout, attention: str) -> float:
    """What autograd keeps for one layer of one micro-batch (see module docstring)."""
    s, b, h, tp = w.seq_len, lay.micro_batch, arch.hidden, lay.tensor_parallel
    fw = resolve(w.framework, w.kind)
    a = 4.0 if w.precision == "fp32" else 2.0
    inter = arch.intermediate * arch.experts_active
    kv = arch.q_dim if fw.repeat_kv else arch.kv_dim
    attention_io = (arch.q_dim + 2 * kv) * a + arch.q_dim * a  # q, k, v and the output
    # two RMSNorms (fp32 input, normalized, weighted); gate, activation, up, product
    kept = 2 * h * (4.0 + 2 * a) + attention_io + 4 * inter * a
    if w.adapters and fw.lora_dropout:
        kept += dropout_bytes(arch, w.lora_targets, a)
    per_token = kept / tp
    scores = 5.0 * arch.heads * s * s * b / tp if attention == "eager" else 0.0
    return (s * b * per_token + scores) / lay.context_parallel


def dropout_bytes(arch: ModelArch, targets: str, a: float) -> float:
    """LoRA input dropout per token of one layer: a 1-byte mask and a dropped copy of
    each input the adapters read (one for LitGPT's fused q/k/v, one per other matrix)."""
    h, inter = arch.hidden, arch.intermediate * arch.experts_active
    inputs = {"qv": h, "attention": h + arch.q_dim}.get(targets, 3 * h + arch.q_dim + inter)
    return inputs * (1.0 + a)


def op_sac_bytes_per_token(arch: ModelArch, a: float) -> float:
    """What torchtitan's selective op checkpointing keeps per layer per token (module
    docstring): the block input, wq, wv, the attention output, w1 and w2."""
    inter = arch.intermediate * arch.experts_active
    return (2 * arch.hidden + 2 * arch.q_dim + arch.kv_dim + inter) * a


def activations(w: Workload, lay: Layout) -> dict[str, float]:
    """Activation memory per GPU: the micro-batches in flight on the first stage."""
    arch, tp, pp = w.arch, lay.tensor_parallel, lay.pipeline_parallel
    if not w.training:
        return {}
    fw = resolve(w.framework, w.kind)
    attention = "flash" if lay.checkpointing == "selective" else w.attention
    per_layer = layer_activation_bytes(arch, w, lay, attention)
    a = 4.0 if w.precision == "fp32" else 2.0
    logits = lay.micro_batch * w.seq_len * arch.vocab * fw.logits_bytes / tp / lay.context_parallel
    in_flight = float(min(pp, max(1, lay.grad_accum)) if pp > 1 else 1)
    if pp > 1 and lay.virtual_pipeline > 1:  # interleaving warms up more micro-batches
        in_flight *= 1 + (pp - 1) / (pp * lay.virtual_pipeline)
    layers = arch.layers / pp * in_flight
    tokens = w.seq_len * lay.micro_batch / tp / lay.context_parallel
    if lay.checkpointing == "full":
        share = recompute_share(arch.layers, lay)
        inputs = layers * (share * tokens * arch.hidden * a + (1 - share) * per_layer)
        return {"activations": inputs, "recompute_peak": per_layer, "logits": logits}
    if lay.checkpointing == "selective" and fw.selective == "op":
        kept = layers * tokens * op_sac_bytes_per_token(arch, a)
        return {"activations": kept, "recompute_peak": per_layer, "logits": logits}
    return {"activations": layers * per_layer, "logits": logits}


def recompute_share(layers: int, lay: Layout) -> float:
    """The share of layers full checkpointing recomputes (the rest keep everything)."""
    if not lay.recompute_layers:
        return 1.0
    per_chunk = layers / max(1, lay.pipeline_parallel * lay.virtual_pipeline)
    return min(1.0, lay.recompute_layers / per_chunk)


def kv_cache_bytes_per_token(arch: ModelArch, bytes_per_value: float = 2.0) -> float:
    """2 (K and V) x layers x kv_heads x head_dim x bytes."""
    return 2.0 * arch.layers * arch.kv_dim * bytes_per_value


def kv_bytes_per_value(w: Workload) -> float:
    return 1.0 if w.precision == "fp8" else 2.0


def inference_context(w: Workload) -> int:
    """Tokens one sequence holds at its longest: the stated context (seq_len) or, when
    only requests are given, their prompt plus output."""
    if "seq_len" in w.explicit or not w.requests:
        return w.seq_len
    return w.input_tokens + w.output_tokens


def serving_fixed(w: Workload, lay: Layout) -> dict[str, float]:
    """What a serving replica holds per GPU besides KV cache: weights, the prefill
    workspace, last-position logits and the engine's runtime."""
    arch, tp = w.arch, lay.tensor_parallel
    fw = resolve(w.framework, w.kind)
    batch = lay.batch or w.batch or 1
    chunk = min(batch * inference_context(w), 8192)  # chunked prefill bounds one layer
    if fw.legacy_profile:  # vLLM <= 0.2 profiled max(max_model_len, 2048) tokens at once
        chunk = max(inference_context(w), 2048)
    work = chunk * (4 * arch.hidden + 3 * arch.intermediate * arch.experts_active) * 2.0 / tp
    parts = {
        **model_states(w, lay),
        "workspace": work,
        "logits": batch * arch.vocab * 4.0,
        "overhead": fw.runtime_bytes(tp),
    }
    if fw.legacy_profile and tp > 1:
        # Every all-reduce output of the profiling pass is still held when its free
        # memory is read (vllm issue #2150): two row-parallel layers per block (attention
        # output, MLP down projection) and the vocabulary-parallel embedding.
        parts["profile_allreduce"] = (2 * arch.layers + 1) * chunk * arch.hidden * 2.0
    return parts


def kv_cache_bytes(w: Workload, lay: Layout) -> float:
    """KV cache per GPU for ``batch`` sequences at full context."""
    batch = lay.batch or w.batch or 1
    per_token = kv_cache_bytes_per_token(w.arch, kv_bytes_per_value(w))
    return per_token * inference_context(w) * batch / lay.tensor_parallel


def kv_capacity_tokens(w: Workload, lay: Layout, gpu_memory_gib: float) -> float:
    """Tokens of KV cache a replica can hold once its fixed memory is placed."""
    fw = resolve(w.framework, w.kind)
    free = gpu_memory_gib * GIB * fw.memory_fraction - sum(serving_fixed(w, lay).values())
    per_token = kv_cache_bytes_per_token(w.arch, kv_bytes_per_value(w)) / lay.tensor_parallel
    return max(0.0, free / per_token)


def training_overhead(lay: Layout) -> float:
    return CUDA_CONTEXT + (DISTRIBUTED if lay.n_gpus > 1 else 0.0)


def memory_breakdown(w: Workload, lay: Layout) -> dict[str, float]:
    """Bytes per GPU by component for ``w`` laid out as ``lay``."""
    if not w.training:
        fixed = serving_fixed(w, lay)
        return {"weights": fixed.pop("weights"), "kv_cache": kv_cache_bytes(w, lay), **fixed}
    parts = model_states(w, lay)
    parts.update(activations(w, lay))
    if lay.sharding == "zero3" and lay.dp > 1:
        # ZeRO-3/FSDP gathers whole layers before use and prefetches the next one; the
        # embedding is gathered whole too (DeepSpeed: 4 bytes x its largest tensor).
        layer = max(w.arch.layer_params(), float(w.arch.vocab * w.arch.hidden))
        parts["zero3_buffers"] = 2 * layer / lay.tensor_parallel * 2.0
    parts["overhead"] = training_overhead(lay)
    return parts


def usable_fraction(w: Workload) -> float:
    """Share of each GPU's memory the job's framework fills (serving engines reserve)."""
    return 1.0 if w.training else resolve(w.framework, w.kind).memory_fraction


def total_gib(parts: dict[str, float]) -> float:
    return sum(parts.values()) / GIB
