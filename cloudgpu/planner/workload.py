"""The ``workload:`` block of job.yaml: its vocabulary, validation and defaults.

Its keys and their forms are declared once, in cloudgpu.spec.workload (WORKLOAD), which
the job loader and the JSON Schema check; this module interprets the block and checks
what spans several keys. Every mistake is one ConfigError naming the key and the
expected form. This module only parses; it must not estimate anything.

    workload:
      kind: finetune        # train | finetune | lora | qlora | inference   (required)
      model: llama-3-8b     # a bundled model, or params: 8B, or the shape itself:
                            # layers, hidden, heads, vocab (+ kv_heads, intermediate,
                            # head_dim, experts, experts_active, tied) as keys here or
                            # inside an arch: mapping
      tokens: 2B            # tokens to train on (training kinds: required)
      precision: bf16       # bf16 | fp16 | fp32 | fp8 (inference also int8 | int4)
      seq_len: 4096         # training sequence length / inference context (default 2048)
      framework: auto       # megatron | deepspeed | fsdp | hf-trainer | nanogpt-style (training);
                            # vllm | vllm-0.2 | tensorrt-llm | gpt-fast | hf-generate
                            # (inference); auto: fsdp for train, hf-trainer for
                            # fine-tunes, vllm for inference
      mfu: 0.45             # measured end-to-end model-FLOPs utilisation (communication and
                            # pipeline bubbles included): replaces the whole time model
      # layout: every key below is searched per machine when omitted, pinned when given
      global_batch: auto    # sequences per optimizer step (auto: 2M tokens for train, 128
                            # sequences for fine-tunes)
      micro_batch: auto     # sequences per GPU per micro-step
      grad_accum: auto      # micro-steps per optimizer step (global_batch / dp / micro_batch)
      checkpointing: auto   # auto | none | selective | full | true (=full) | false (=none)
      attention: flash      # flash | eager (eager keeps the a*s^2 attention scores)
      optimizer: adamw      # adamw | adam | adam8bit | sgd | sgd_nomomentum
      sharding: auto        # auto | ddp | zero1 | zero2 | zero3 | fsdp (=zero3)
      tensor_parallel: auto # tensor-parallel degree inside a node (1, 2, 4, 8)
      pipeline_parallel: auto   # pipeline stages across nodes (divides num_nodes)
      virtual_pipeline: auto # interleaved 1F1B: model chunks per stage (divides the bubble)
      context_parallel: 1   # GPUs each sequence is split over (long context)
      network_gbps: auto    # node-to-node Gbit/s to assume (auto: the offer's)
      lora_rank: 16         # lora/qlora adapter rank (qlora default 64, as the QLoRA paper)
      lora_targets: all     # all | attention | qv (which linear layers get adapters)
      # inference
      batch: auto           # concurrent sequences (auto: the most that fit, up to 256)
      requests: 10000       # requests to serve, each input_tokens + output_tokens
      input_tokens: 512
      output_tokens: 256
      # data
      data_size: 200GB      # bytes to stage when the data block's size is not known
      samples_per_s: 3000   # what one GPU consumes at full speed ...
      bytes_per_sample: 110KB   # ... and the size of one sample: gives the data-stall estimate
      cpu_samples_per_s: 100    # decode/augment rate of one vCPU (optional)
      # spot
      spot_interruptions_per_hour: 0.05
      checkpoint_minutes: 30
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudgpu.errors import ConfigError
from cloudgpu.planner.frameworks import framework_names
from cloudgpu.planner.models import (
    ModelArch,
    arch_from_block,
    arch_from_params,
    lookup_model,
    with_params,
)
from cloudgpu.spec import units
from cloudgpu.spec.workload import (
    ARCH,
    CHECKPOINTING,
    KINDS,
    OPTIMIZERS,
    PRECISIONS,
    SHARDINGS,
    WORKLOAD,
)

TRAIN_KINDS = ("train", "finetune", "lora", "qlora")

LORA_TARGETS = ("all", "attention", "qv")  # every linear | q, k, v, o | q and v (LitGPT, PEFT)


@dataclass(frozen=True)
class Workload:
    kind: str
    arch: ModelArch
    tokens: float = 0.0
    precision: str = "bf16"
    seq_len: int = 2048
    framework: str = "auto"
    mfu: float | None = None
    global_batch: int = 0  # 0: auto (here and below: searched per machine)
    micro_batch: int = 0
    grad_accum: int = 0
    checkpointing: str = "auto"
    attention: str = "flash"
    optimizer: str = "adamw"
    sharding: str = "auto"
    tensor_parallel: int = 0
    pipeline_parallel: int = 0
    virtual_pipeline: int = 0  # 0: searched where the framework interleaves, else 1
    context_parallel: int = 1
    network_gbps: float = 0.0
    lora_rank: int = 16
    lora_targets: str = "all"
    batch: int = 0  # 0: auto
    requests: float = 0.0
    input_tokens: int = 512
    output_tokens: int = 256
    data_size: float = 0.0
    samples_per_s: float = 0.0
    bytes_per_sample: float = 0.0
    cpu_samples_per_s: float = 0.0
    spot_interruptions_per_hour: float = 0.05
    checkpoint_minutes: float = 30.0
    explicit: frozenset[str] = frozenset()  # keys the job stated (the rest are defaults)

    @property
    def training(self) -> bool:
        return self.kind in TRAIN_KINDS

    @property
    def adapters(self) -> bool:
        return self.kind in ("lora", "qlora")


# Keys a workload block may use (the Workload fields, the model given as one of model /
# params / arch, or the architecture flat: layers, hidden, heads, ... beside kind).
ARCH_KEYS = tuple(ARCH)
_KNOWN_KEYS = frozenset(WORKLOAD.keys)


def parse_count(value: Any, key: str) -> float:
    """``2B``, ``500M``, ``1.5T``, ``8e9`` or a number (the job file's one grammar)."""
    try:
        return units.parse_amount(value)
    except ValueError as exc:
        raise ConfigError(f"workload.{key}: {exc}") from exc


def parse_bytes(value: Any, key: str) -> float:
    """``200GB``, ``1.5TB``, ``110KB``, ``512MiB`` or a number of bytes."""
    try:
        return units.parse_bytes(value)
    except ValueError as exc:
        raise ConfigError(f"workload.{key}: {exc}") from exc


def _int(raw: Mapping[str, Any], key: str, default: int, minimum: int = 1) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ConfigError(f"workload.{key}: expected a whole number, got '{value}'")
    if value < minimum:
        raise ConfigError(f"workload.{key}: must be at least {minimum}")
    return int(value)


def _choice(raw: Mapping[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = str(raw.get(key, default)).lower().replace("-", "").replace("_", "")
    for option in allowed:
        if value == option.replace("_", ""):
            return option
    raise ConfigError(f"workload.{key}: expected one of {' | '.join(allowed)}, got '{value}'")


def _auto_int(raw: Mapping[str, Any], key: str) -> int:
    """A whole number >= 1, or 0 for ``auto`` / omitted (the planner searches it)."""
    if raw.get(key, "auto") == "auto":
        return 0
    return _int(raw, key, 1)


def _positive(raw: Mapping[str, Any], key: str) -> float:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e7:
        raise ConfigError(f"workload.{key}: expected a positive number or auto, got '{value}'")
    return float(value)


def _framework(raw: Mapping[str, Any], kind: str) -> str:
    """The framework named (case, - and _ forgiven, as the schema's loose choice)."""
    names = framework_names(training=kind != "inference")
    value = str(raw.get("framework", "auto")).strip().lower()
    key = value.replace("-", "").replace("_", "")
    for name in ("auto", *names):
        if key == name.replace("-", ""):
            return name
    what = "serving" if kind == "inference" else "training"
    other = {n.replace("-", "") for n in framework_names(training=kind == "inference")}
    raise ConfigError(
        f"workload.framework: expected auto or a {what} framework ({' | '.join(names)}), got "
        f"'{value}'"
        + (
            f" (a {'training' if what == 'serving' else 'serving'} framework)"
            if key in other
            else ""
        )
    )


def _float(raw: Mapping[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"workload.{key}: expected a non-negative number, got '{value}'")
    return float(value)


def _arch(raw: Mapping[str, Any]) -> ModelArch:
    params = parse_count(raw["params"], "params") if "params" in raw else None
    flat = {k: raw[k] for k in ARCH_KEYS if k in raw}
    if "arch" in raw or flat:
        block = raw.get("arch", {})
        if not isinstance(block, Mapping):
            raise ConfigError("workload.arch: expected a mapping of layers, hidden, heads, ...")
        if "model" in raw:
            raise ConfigError("workload: give either model or an architecture, not both")
        return arch_from_block({**block, **flat}, params)
    if "model" in raw:
        return with_params(lookup_model(str(raw["model"])), params)
    if params is not None:
        return arch_from_params(params)
    raise ConfigError(
        "workload: missing model, params or arch (the planner needs the model's size)",
        hint="e.g. model: llama-3-8b, or params: 8B",
    )


def _checkpointing(raw: Mapping[str, Any]) -> str:
    value = raw.get("checkpointing", "auto")
    if value is True:
        return "full"
    if value is False:
        return "none"
    return _choice(raw, "checkpointing", "auto", CHECKPOINTING)


def parse_workload(raw: Mapping[str, Any]) -> Workload:
    """Validate the workload block and fill its defaults."""
    unknown = sorted(set(raw) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"workload: unknown key(s) {', '.join(unknown)}",
            hint=f"known keys: {', '.join(sorted(_KNOWN_KEYS))}",
        )
    if "kind" not in raw:
        raise ConfigError(f"workload: missing kind (one of {' | '.join(KINDS)})")
    kind = _choice(raw, "kind", "", KINDS)
    w = Workload(
        kind=kind,
        arch=_arch(raw),
        tokens=parse_count(raw.get("tokens", 0), "tokens"),
        precision=_choice(raw, "precision", "bf16", PRECISIONS),
        seq_len=_int(raw, "seq_len", 2048),
        framework=_framework(raw, kind),
        mfu=_mfu(raw),
        global_batch=_auto_int(raw, "global_batch"),
        micro_batch=_auto_int(raw, "micro_batch"),
        grad_accum=_auto_int(raw, "grad_accum"),
        checkpointing=_checkpointing(raw),
        attention=_choice(raw, "attention", "flash", ("flash", "eager")),
        optimizer=_choice(raw, "optimizer", "adamw", OPTIMIZERS),
        sharding=_choice(raw, "sharding", "auto", SHARDINGS).replace("fsdp", "zero3"),
        tensor_parallel=_auto_int(raw, "tensor_parallel"),
        pipeline_parallel=_auto_int(raw, "pipeline_parallel"),
        virtual_pipeline=_auto_int(raw, "virtual_pipeline"),
        context_parallel=_int(raw, "context_parallel", 1),
        network_gbps=0.0
        if raw.get("network_gbps", "auto") == "auto"
        else _positive(raw, "network_gbps"),
        lora_rank=_int(raw, "lora_rank", 64 if kind == "qlora" else 16),
        lora_targets=_choice(raw, "lora_targets", "all", LORA_TARGETS),
        batch=0 if raw.get("batch", "auto") == "auto" else _int(raw, "batch", 1),
        requests=parse_count(raw.get("requests", 0), "requests"),
        input_tokens=_int(raw, "input_tokens", 512, 0),
        output_tokens=_int(raw, "output_tokens", 256, 0),
        data_size=parse_bytes(raw.get("data_size", 0), "data_size"),
        samples_per_s=_float(raw, "samples_per_s", 0.0),
        bytes_per_sample=parse_bytes(raw.get("bytes_per_sample", 0), "bytes_per_sample"),
        cpu_samples_per_s=_float(raw, "cpu_samples_per_s", 0.0),
        spot_interruptions_per_hour=_float(raw, "spot_interruptions_per_hour", 0.05),
        checkpoint_minutes=_float(raw, "checkpoint_minutes", 30.0),
        explicit=frozenset(raw),
    )
    _check_consistent(w, raw)
    return w


def _mfu(raw: Mapping[str, Any]) -> float | None:
    if "mfu" not in raw:
        return None
    value = raw["mfu"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"workload.mfu: expected a fraction in (0, 1], got '{value}'")
    return float(value)


def _check_consistent(w: Workload, raw: Mapping[str, Any]) -> None:
    """Contradictions and missing fields the estimate needs, each named."""
    if w.kind == "qlora" and w.precision not in ("bf16", "fp16"):
        raise ConfigError(
            f"workload.precision: qlora keeps the base model in 4-bit NF4 and computes in "
            f"bf16/fp16; precision: {w.precision} contradicts it",
            hint="use precision: bf16, or kind: lora for a 16-bit base",
        )
    if w.training and w.precision in ("int8", "int4"):
        raise ConfigError(
            f"workload.precision: {w.precision} is for inference; training uses bf16, fp16,"
            " fp32 or fp8 (for a 4-bit base use kind: qlora)"
        )
    if w.training and not w.tokens:
        raise ConfigError(
            f"workload.tokens: required for kind: {w.kind} (how many tokens to train on, e.g."
            " tokens: 2B)"
        )
    if not w.training:
        for key in (
            "optimizer",
            "sharding",
            "checkpointing",
            "lora_rank",
            "grad_accum",
            "global_batch",
            "micro_batch",
            "pipeline_parallel",
            "virtual_pipeline",
            "context_parallel",
        ):
            if key in raw:
                raise ConfigError(f"workload.{key}: only applies to training, not kind: inference")
        if not w.requests and not w.tokens:
            raise ConfigError(
                "workload: kind: inference needs requests (with input_tokens/output_tokens) or"
                " tokens (output tokens to generate)"
            )
    if not w.adapters and ("lora_rank" in raw or "lora_targets" in raw):
        raise ConfigError(f"workload.lora_rank: only applies to kind: lora or qlora, not {w.kind}")
    if w.samples_per_s and not w.bytes_per_sample:
        raise ConfigError("workload.bytes_per_sample: required with samples_per_s")
    if w.arch.experts_active > w.arch.experts:
        raise ConfigError("workload.arch: experts_active must not exceed experts")
