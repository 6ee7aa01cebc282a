"""The workload block of job.yaml: the keys and forms the planner's estimate reads.

Only the forms are checked here (a number in range, one of a few names); what the
values mean together (a model or a shape, which batch sizes fit) is the planner's
(cloudgpu.planner.workload), which reads the option lists from here.
"""

from __future__ import annotations

from typing import Any

from cloudgpu.spec import units
from cloudgpu.spec.fields import Block, Value, checked, choice, either, flag, number, text, unit

KINDS = ("train", "finetune", "lora", "qlora", "inference")
PRECISIONS = ("bf16", "fp16", "fp32", "fp8", "int8", "int4")
OPTIMIZERS = ("adamw", "adam", "adam8bit", "sgd", "sgd_nomomentum")
SHARDINGS = ("auto", "ddp", "zero1", "zero2", "zero3", "fsdp")
CHECKPOINTING = ("auto", "none", "selective", "full")
# The planner's framework table (cloudgpu/planner/data/frameworks.json) has one row each.
FRAMEWORKS = (
    "auto",
    "megatron",
    "deepspeed",
    "fsdp",
    "torchtune",
    "litgpt",
    "hf-trainer",
    "nanogpt-style",
    "vllm",
    "vllm-0.2",
    "tensorrt-llm",
    "gpt-fast",
    "hf-generate",
)


def _whole(description: str, lo: int, hi: float) -> Value:
    return checked(number(description, lo, hi, integer=True, lo_open=False))


def _whole_or_auto(description: str, hi: float) -> Value:
    """A whole number >= 1, or ``auto``: the planner searches it per machine."""
    return checked(
        either(
            description,
            number("", 1, hi, integer=True, lo_open=False),
            choice("", ("auto",)),
        )
    )


def _rate(description: str, hi: float) -> Value:
    return checked(number(description, 0, hi, lo_open=False))


def _amount(description: str, hi: float) -> Value:
    return checked(
        unit(description, units.parse_amount, units.AMOUNT_PATTERN, 0, hi, units.AMOUNT_FORM)
    )


def _bytes(description: str, hi: float) -> Value:
    return checked(
        unit(description, units.parse_bytes, units.BYTES_PATTERN, 0, hi, units.BYTES_FORM)
    )


def _pick(description: str, options: tuple[str, ...], **kw: Any) -> Value:
    return checked(choice(description, options, loose=True, **kw))


ARCH: dict[str, Value] = {
    "layers": _whole("transformer blocks", 1, 100_000),
    "hidden": _whole("model width", 1, 10_000_000),
    "heads": _whole("attention heads", 1, 100_000),
    "kv_heads": _whole("key/value heads (GQA)", 1, 100_000),
    "vocab": _whole("vocabulary size", 1, 1e9),
    "intermediate": _whole("MLP width", 1, 1e8),
    "head_dim": _whole("per-head width", 0, 100_000),
    "experts": _whole("MoE experts", 1, 100_000),
    "experts_active": _whole("experts per token", 1, 100_000),
    "tied": flag("tied input/output embeddings"),
}

WORKLOAD = Block(
    {
        "kind": _pick("train | finetune | lora | qlora | inference", KINDS),
        "model": checked(text("a bundled model, e.g. llama-3-8b", max_len=200)),
        "params": _amount("parameter count, e.g. 8B", 1e15),
        "tokens": _amount("tokens to train on (or to generate), e.g. 2B", 1e17),
        "precision": _pick("bf16 | fp16 | fp32 | fp8 | int8 | int4", PRECISIONS),
        "seq_len": _whole("sequence length / context", 1, 100_000_000),
        "framework": _pick(
            "what runs the job, for its efficiency and memory habits: " + " | ".join(FRAMEWORKS),
            FRAMEWORKS,
        ),
        "global_batch": _whole_or_auto("sequences per optimizer step", 1e9),
        "micro_batch": _whole_or_auto("sequences per GPU per step", 1_000_000),
        "grad_accum": _whole_or_auto("micro-steps per optimizer step", 1_000_000),
        "checkpointing": _pick(
            "activation recomputation", CHECKPOINTING, booleans={True: "full", False: "none"}
        ),
        "attention": _pick("flash | eager", ("flash", "eager")),
        "optimizer": _pick("adamw | adam | adam8bit | sgd | sgd_nomomentum", OPTIMIZERS),
        "sharding": _pick("auto | ddp | zero1 | zero2 | zero3 | fsdp", SHARDINGS),
        "tensor_parallel": _whole_or_auto("tensor-parallel degree inside a node", 1024),
        "pipeline_parallel": _whole_or_auto("pipeline stages (across nodes when searched)", 1024),
        "virtual_pipeline": _whole_or_auto("interleaved pipeline chunks per stage", 1024),
        "context_parallel": _whole("GPUs each sequence is split over", 1, 1024),
        "network_gbps": checked(
            either(
                "node-to-node Gbit/s the estimate assumes (auto: the offer's)",
                number("", 0, 1e7),
                choice("", ("auto",)),
            )
        ),
        "lora_rank": _whole("adapter rank (lora/qlora)", 1, 65_536),
        "lora_targets": _pick("all | attention | qv", ("all", "attention", "qv")),
        "mfu": checked(number("measured end-to-end model FLOPs utilisation, a fraction", 0, 1)),
        "batch": checked(
            either(
                "concurrent sequences (inference)",
                number("", 1, 1_000_000, integer=True, lo_open=False),
                choice("", ("auto",)),
            )
        ),
        "requests": _amount("requests to serve (inference)", 1e15),
        "input_tokens": _whole("prompt tokens per request", 0, 100_000_000),
        "output_tokens": _whole("generated tokens per request", 0, 100_000_000),
        "data_size": _bytes("bytes to stage when the data block's size is unknown", 1e18),
        "samples_per_s": _rate("samples one GPU consumes per second", 1e9),
        "bytes_per_sample": _bytes("size of one sample", 1e12),
        "cpu_samples_per_s": _rate("samples one vCPU decodes per second", 1e9),
        "spot_interruptions_per_hour": _rate("expected spot interruptions per hour", 100),
        "checkpoint_minutes": _rate("minutes between checkpoints", 1e6),
        "arch": Block(
            {"name": checked(text("a label", max_len=200)), **ARCH},
            description="the model's shape, instead of model: or params:",
        ),
        **ARCH,
    },
    required=("kind",),
    description="sizes and times the job (see `cloudgpu plan --help`)",
)
