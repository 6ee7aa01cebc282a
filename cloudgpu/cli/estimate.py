"""`cloudgpu estimate --model ... --kind ...`: size and cost a workload without a job
file, over the bundled catalog (or hypothetical machines of a pinned GPU count).

Thin, as `plan` is (cloudgpu/cli/plan.py, whose rendering it shares): builds a job from
the flags, checked by the job file's own rules, and plans it through the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from cloudgpu.catalog import GpuRegistry, Offer, load_catalog, load_registry
from cloudgpu.cli.context import get_app
from cloudgpu.cli.params import Number
from cloudgpu.cli.plan import F, emit, plan_options
from cloudgpu.cli.sources import run_history, startup_history
from cloudgpu.planner import plan as make_plan
from cloudgpu.planner.choose import buyable
from cloudgpu.spec.fields import FieldError, check
from cloudgpu.spec.model import GpuRequest, JobSpec, Resources
from cloudgpu.spec.workload import WORKLOAD

_WORKLOAD_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--params", "params", str, "Parameter count instead of --model, e.g. 8B."),
    ("--tokens", "tokens", str, "Tokens to train on (training kinds), e.g. 1B."),
    ("--precision", "precision", str, "bf16 | fp16 | fp32 | fp8 | int8 | int4."),
    ("--seq-len", "seq_len", int, "Sequence length / inference context."),
    ("--framework", "framework", str, "megatron | deepspeed | fsdp | hf-trainer | vllm | ..."),
    ("--global-batch", "global_batch", int, "Sequences per optimizer step."),
    ("--pipeline-parallel", "pipeline_parallel", int, "Pipeline stages."),
    ("--micro-batch", "micro_batch", int, "Sequences per GPU per step."),
    ("--grad-accum", "grad_accum", int, "Micro-steps per optimizer step."),
    ("--checkpointing", "checkpointing", str, "auto | none | selective | full."),
    ("--optimizer", "optimizer", str, "adamw | adam8bit | sgd | ..."),
    ("--sharding", "sharding", str, "auto | ddp | zero1 | zero2 | zero3 | fsdp."),
    ("--lora-rank", "lora_rank", int, "Adapter rank (lora/qlora)."),
    ("--tensor-parallel", "tensor_parallel", int, "Tensor-parallel degree in a node."),
    ("--attention", "attention", str, "flash | eager."),
    ("--mfu", "mfu", float, "Measured end-to-end MFU (replaces the time model)."),
    ("--batch", "batch", int, "Concurrent sequences (inference)."),
    ("--requests", "requests", str, "Requests to serve (inference), e.g. 100K."),
    ("--input-tokens", "input_tokens", int, "Prompt tokens per request."),
    ("--output-tokens", "output_tokens", int, "Generated tokens per request."),
)


def _workload_flags(func: F) -> F:
    for flag, dest, typ, helptext in reversed(_WORKLOAD_FLAGS):
        func = click.option(flag, dest, type=typ, default=None, help=helptext)(func)
    return func


def pinned_offers(
    registry: GpuRegistry, offers: Sequence[Offer], gpu: str, count: int, spot: bool
) -> list[Offer]:
    """Hypothetical machines of ``count`` x each GPU that ``gpu`` names (a family such as
    A100-80GB gives one per variant), each priced at the catalog's cheapest $/GPU-hour
    for that GPU and networked like the best-connected real offer of it."""
    market = "spot" if spot else "on_demand"
    names = sorted(registry.matches(gpu))
    if not names:
        registry.require(gpu)  # raises, naming the closest known GPUs
    out = []
    for name in names:
        spec = registry.require(name)
        same = [o for o in offers if o.gpu == spec.name and o.gpu_count and o.market == market]
        per_gpu = min((o.price_per_gpu_hour for o in same), default=0.0)
        network = max((o.network_gbps for o in same if o.gpu_count == count), default=0.0)
        out.append(
            Offer(
                provider="estimate",
                instance_type=f"{count}x{spec.name}",
                region="-",
                zone="",
                market=market,
                gpu=spec.name,
                gpu_count=count,
                gpu_memory_gb=spec.memory_gb,
                vcpus=0.0,
                memory_gb=0.0,
                price_per_hour=per_gpu * count,
                network_gbps=network,
                price_source="cheapest catalog $/GPU-hour" if same else "no catalog price ($0)",
            )
        )
    return out


def workload_of(kind: str, model: str | None, flags: Mapping[str, Any]) -> dict[str, Any]:
    """The ``workload:`` block the flags spell, checked as a job file's is (the error
    names the flag)."""
    workload: dict[str, Any] = {"kind": kind}
    if model:
        workload["model"] = model
    workload.update({k: v for k, v in flags.items() if v is not None})
    try:
        check(WORKLOAD, workload, "")
    except FieldError as exc:
        flag = "--" + exc.key.split(".")[0].replace("_", "-")
        raise click.BadParameter(str(exc), param_hint=flag) from None
    return workload


@click.command("estimate")
@click.option("--model", help="A bundled model, e.g. llama-3-70b.")
@click.option("--kind", required=True, help="train | finetune | lora | qlora | inference.")
@_workload_flags
@click.option("--gpu", help="Only this GPU (name or family).")
@click.option("--count", type=Number(1, 999, integer=True), help="Pin GPUs per node (needs --gpu).")
@click.option(
    "--nodes",
    type=Number(1, 10_000, integer=True),
    default=1,
    show_default=True,
    help="Nodes of that machine.",
)
@click.option("--spot/--on-demand", "spot", default=None, help="Only spot / on-demand.")
@click.option("--provider", "providers", multiple=True, help="Only this provider (repeatable).")
@plan_options
def estimate(
    model: str | None,
    kind: str,
    gpu: str | None,
    count: int | None,
    nodes: int,
    spot: bool | None,
    providers: tuple[str, ...],
    objective: str,
    as_json: bool,
    limit: int,
    all_rows: bool,
    **flags: Any,
) -> None:
    """Size and cost a workload without a job file."""
    if count is not None and not gpu:
        raise click.UsageError("--count needs --gpu")
    workload = workload_of(kind, model, flags)
    app = get_app()
    registry = load_registry()
    # The catalog, less what no launch could buy (the plan's own rule, choose.buyable).
    offers, left_out = buyable(load_catalog(app.paths).offers, app.registry.capabilities)
    gpu_req = GpuRequest(name=gpu)
    if gpu and count is not None:
        offers = pinned_offers(registry, offers, gpu, count, bool(spot))
        gpu_req = GpuRequest()
    spot_text = "auto" if spot is None else str(spot).lower()
    job = JobSpec(
        name="estimate",
        workload=workload,
        num_nodes=nodes,
        source="estimate",
        resources=Resources(gpu=gpu_req, spot=spot_text, providers=providers),
    )
    result = make_plan(
        job,
        offers,
        registry=registry,
        objective=objective,
        history=startup_history(app),
        runs=run_history(app),
        capabilities=app.registry.capabilities,
    )
    emit(result, as_json, limit, all_rows)
    if not as_json:
        for note in left_out:
            click.echo(f"note: {note}", err=True)
    if gpu and count is not None and not as_json:
        for o in offers:
            click.echo(f"note: {count}x {o.gpu} is hypothetical, priced at the {o.price_source}")
