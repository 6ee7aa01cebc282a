"""What a training or serving framework achieves on a GPU: the efficiency factors the
time and memory models read, from the bundled data/frameworks.json (every factor there
names the published figure it comes from).

Shared rules (constants below, each with its source):
- Size factor: small models keep the GPU busier with memory-bound work (norms,
  activations, softmax) relative to their matmuls, and more so on GPUs whose compute
  outgrew their memory bandwidth: factor = 1 / (1 + SIZE_KAPPA x (peak / bandwidth) /
  hidden). SIZE_KAPPA = 2.6 reproduces llm-foundry's A100 size sweep at 2k context
  (MFU of 125M..3B relative to 7B: 0.70, 0.80, 0.89, 0.93, 0.97; the rule gives 0.72,
  0.79, 0.87, 0.92, 0.95), https://github.com/mosaicml/llm-foundry/blob/main/scripts/
  train/benchmarking/README.md.
- Attention FLOPs run at ATTENTION_EFFICIENCY of the dense matmuls' rate (causal
  FlashAttention skips half the blocks but its kernels run slower than GEMMs): the same
  table's MPT-7B at 64k context (8 GPUs, full AC) is 1,013 tokens/s on A100 and 1,956 on
  H100, 0.48 and 0.39 of the dense rate once the dense part is taken out: 0.45.
- fp8 training runs at FP8_SPEEDUP x the bf16 rate: torchtitan Llama-3.1-8B on 8 H100,
  8,532 vs 6,667 tokens/s (1.28x, docs/performance.md); llm-foundry 3B at 512 tokens,
  36,527 vs 27,965 (1.31x).

This module only reads its data file and does arithmetic; it must not time or size a
workload itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

SIZE_KAPPA = 2.6
ATTENTION_EFFICIENCY = 0.45
FP8_SPEEDUP = 1.3
TRAIN_DEFAULT = {"train": "fsdp", "finetune": "hf-trainer", "lora": "hf-trainer"}
SERVE_DEFAULT = "vllm"


@dataclass(frozen=True)
class Framework:
    name: str
    training: bool
    efficiency: dict[str, float] = field(default_factory=dict)  # training, by generation
    grad_bytes: float = 2.0
    fp32_grad_partition: bool = False
    logits_bytes: float = 10.0
    prefill: dict[str, float] = field(default_factory=dict)  # serving, by generation
    decode_bandwidth: float = 0.6
    layer_overhead_s: float = 0.0
    memory_fraction: float = 1.0
    runtime_gib: dict[int, float] = field(default_factory=dict)  # by tensor-parallel degree
    # What `checkpointing: selective` means: "attention" recomputes the core attention
    # (Korthikanti et al.; nothing left to drop with flash attention), "op" is
    # torchtitan's per-op policy (memory.py, timing.py).
    selective: str = "attention"
    repeat_kv: bool = True  # GQA keys/values expanded to every head before attention
    lora_dropout: float = 0.0  # the adapters' input dropout (keeps a mask and a copy)
    interleaved_pipeline: bool = False  # may split each pipeline stage into chunks
    # vLLM <= 0.2's KV sizing: one unchunked profiling pass whose tensor-parallel
    # all-reduce outputs are all still held when free memory is read (memory.py).
    legacy_profile: bool = False
    block_recompute: bool = False  # full checkpointing of only some layers per chunk
    derived_from: tuple[str, ...] = ()

    def train_efficiency(self, generation: str) -> float:
        return _by_generation(self.efficiency, generation)

    def prefill_efficiency(self, generation: str) -> float:
        return _by_generation(self.prefill, generation)

    def runtime_bytes(self, tp: int) -> float:
        """Memory outside the model per GPU: CUDA context, libraries, collective buffers."""
        if not self.runtime_gib:
            return 0.0
        key = max((k for k in self.runtime_gib if k <= max(tp, 1)), default=1)
        return self.runtime_gib[key] * 2**30


def _by_generation(table: dict[str, float], generation: str) -> float:
    return table.get(generation, table.get("default", 0.5))


def _framework(name: str, row: dict[str, Any]) -> Framework:
    return Framework(
        name=name,
        training=bool(row["training"]),
        efficiency={k: float(v) for k, v in row.get("efficiency", {}).items()},
        grad_bytes=float(row.get("grad_bytes", 2)),
        fp32_grad_partition=bool(row.get("fp32_grad_partition", False)),
        logits_bytes=float(row.get("logits_bytes", 10)),
        prefill={k: float(v) for k, v in row.get("prefill_efficiency", {}).items()},
        decode_bandwidth=float(row.get("decode_bandwidth", 0.6)),
        layer_overhead_s=float(row.get("layer_overhead_us", 0.0)) * 1e-6,
        memory_fraction=float(row.get("memory_fraction", 1.0)),
        runtime_gib={int(k): float(v) for k, v in row.get("runtime_gib", {}).items()},
        selective=str(row.get("selective_checkpointing", "attention")),
        repeat_kv=bool(row.get("repeat_kv", True)),
        lora_dropout=float(row.get("lora_dropout", 0.0)),
        interleaved_pipeline=bool(row.get("interleaved_pipeline", False)),
        legacy_profile=bool(row.get("legacy_profile", False)),
        block_recompute=bool(row.get("block_recompute", False)),
        derived_from=tuple(row.get("derived_from", ())),
    )


@lru_cache(maxsize=1)
def raw_table() -> dict[str, Any]:
    text = resources.files("cloudgpu.planner.data").joinpath("frameworks.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


@lru_cache(maxsize=1)
def _table() -> dict[str, Framework]:
    return {name: _framework(name, row) for name, row in raw_table()["frameworks"].items()}


def framework_names(training: bool | None = None) -> tuple[str, ...]:
    return tuple(
        sorted(n for n, f in _table().items() if training is None or f.training == training)
    )


def resolve(name: str, kind: str) -> Framework:
    """The framework a workload runs under: its own, or the default for its kind
    (pretraining: fsdp; fine-tuning: hf-trainer; serving: vllm)."""
    table = _table()
    if name and name != "auto":
        return table[name]
    if kind == "inference":
        return table[SERVE_DEFAULT]
    return table[TRAIN_DEFAULT.get(kind, "hf-trainer")]


def generation(architecture: str) -> str:
    """The efficiency table's generation key for a GPU architecture (gpus.csv)."""
    if architecture in ("Hopper", "Blackwell"):
        return "Hopper"  # Blackwell: no published figure yet; Hopper's, an assumption
    if architecture == "Ada":
        return "Ada"
    return "Ampere" if architecture == "Ampere" else "default"


def size_factor(peak_tflops: float, bandwidth_tbs: float, hidden: int) -> float:
    """The share of the framework's efficiency a model this wide reaches (docstring)."""
    if peak_tflops <= 0 or bandwidth_tbs <= 0 or hidden <= 0:
        return 1.0
    return 1.0 / (1.0 + SIZE_KAPPA * (peak_tflops / bandwidth_tbs) / hidden)
