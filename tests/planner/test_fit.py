"""The layout search (planner/fit.py): its pruned search equals every layout tried, and
the schedules it may choose (interleaved pipeline, context parallelism) cost what their
sources say."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import pytest

from cloudgpu.catalog import load_registry
from cloudgpu.catalog.gpus import usable_gib
from cloudgpu.planner import fit
from cloudgpu.planner.memory import GIB, Layout, memory_breakdown
from cloudgpu.planner.timing import context_parallel_s, train_time
from cloudgpu.planner.workload import parse_workload

REG = load_registry()
H100 = REG.require("H100-SXM")
A100 = REG.require("A100-80GB-SXM")


def _every_layout(w: Any, shape: fit.Shape) -> list[Layout]:
    """Every training layout the search may choose from, nothing pruned."""
    out = []
    for ckpt, (tp, pp) in itertools.product(fit._checkpointings(w), fit._splits(w, shape)):
        dp = max(1, shape.n_gpus // (tp * pp * w.context_parallel))
        shardings = (w.sharding,) if w.sharding != "auto" else fit.SHARDINGS
        for sharding, vp, mb in itertools.product(
            shardings if dp > 1 else ("ddp",),
            fit._virtual_pipelines(w, pp),
            fit._micro_batches(w, dp),
        ):
            lay = fit._layout(w, shape, tp, pp, sharding, ckpt, mb, vp)
            out.append(lay)
            if ckpt == "full" and fit._block_recompute(w):  # every layer count per chunk
                per_chunk = math.ceil(w.arch.layers / (pp * vp))
                out += [replace(lay, recompute_layers=k) for k in range(1, per_chunk)]
    return out


CASES = [
    ({"kind": "train", "model": "llama-3-8b", "seq_len": 8192}, H100, 8, 1),
    ({"kind": "train", "model": "llama-3-70b", "framework": "megatron"}, H100, 8, 4),
    ({"kind": "finetune", "model": "llama-3-8b", "seq_len": 4096}, A100, 4, 1),
    ({"kind": "lora", "model": "llama-2-13b", "framework": "litgpt"}, A100, 1, 1),
    ({"kind": "train", "model": "llama-3-70b", "seq_len": 4096}, A100, 8, 2),
]


@pytest.mark.parametrize(("raw", "spec", "per_node", "nodes"), CASES)
def test_pruned_search_finds_the_fastest_of_every_layout(
    raw: dict[str, Any], spec: Any, per_node: int, nodes: int
) -> None:
    w = parse_workload({"tokens": "1B", **raw})
    shape = fit.Shape(usable_gib(0, spec), per_node, nodes, 3200.0)
    best = math.inf
    for lay in _every_layout(w, shape):
        if sum(memory_breakdown(w, lay).values()) / GIB <= shape.memory_gib:
            best = min(best, train_time(w, lay, spec, shape.network_gbps).compute_hours)
    est = fit.estimate_shape(w, shape, spec)
    assert est.fits == (best < math.inf)
    if est.fits:
        assert est.hours == pytest.approx(best, rel=1e-9)


def test_megatron_interleaves_the_pipeline_where_it_pays() -> None:
    # Llama-3-70B on 4 nodes of 8 H100: the search splits each of the 4 stages into
    # chunks (Narayanan et al. s2.2.2) unless the job pins virtual_pipeline.
    raw = {"kind": "train", "model": "llama-3-70b", "tokens": "1B", "framework": "megatron"}
    shape = fit.Shape(usable_gib(0, H100), 8, 4, 3200.0)
    auto = fit.estimate_shape(parse_workload(raw), shape, H100)
    plain = fit.estimate_shape(parse_workload({**raw, "virtual_pipeline": 1}), shape, H100)
    assert auto.layout is not None and plain.layout is not None
    assert auto.layout.pipeline_parallel == 4 and auto.layout.virtual_pipeline > 1
    assert "interleaved" in auto.layout.describe() and plain.layout.virtual_pipeline == 1
    assert auto.hours is not None and plain.hours is not None and auto.hours < plain.hours
    # Frameworks without the schedule (fsdp here) never interleave.
    fsdp = fit.estimate_shape(parse_workload({**raw, "framework": "fsdp"}), shape, H100)
    assert fsdp.layout is not None and fsdp.layout.virtual_pipeline == 1


def test_interleaving_divides_the_bubble_and_keeps_more_micro_batches() -> None:
    w = parse_workload({"kind": "train", "model": "llama-3-70b", "tokens": "1B"})
    base = {"gpus_per_node": 8, "num_nodes": 4, "tensor_parallel": 8, "pipeline_parallel": 4}
    one = Layout(**base, grad_accum=8, checkpointing="full")
    four = Layout(**base, grad_accum=8, checkpointing="full", virtual_pipeline=4)
    t1, t4 = train_time(w, one, H100, 3200.0), train_time(w, four, H100, 3200.0)
    # (ga + (pp-1)/v) slots: 8 + 3 against 8 + 0.75, stage traffic aside
    assert t1.compute_hours / t4.compute_hours == pytest.approx(11 / 8.75, rel=0.02)
    # Korthikanti et al. s4.2.3: the first stage holds 1 + (p-1)/(p v) times as much
    a1 = memory_breakdown(w, one)["activations"]
    assert memory_breakdown(w, four)["activations"] == pytest.approx(a1 * (1 + 3 / 16))


def test_context_parallel_ring_hides_behind_attention_inside_a_node_only() -> None:
    w = parse_workload({"kind": "train", "model": "llama-3-8b", "tokens": "1B", "seq_len": 8192})
    inside = Layout(8, 1, 1, "zero2", context_parallel=2)
    # Long context on NVLink: the K/V ring is hidden behind the attention it feeds.
    assert context_parallel_s(w, inside, H100, 3200.0, attention_s=0.05) == 0.0
    # Spread over nodes on a slow network, with little attention to hide behind, it shows.
    across = Layout(1, 8, 1, "zero2", context_parallel=8)
    exposed = context_parallel_s(w, across, H100, 100.0, attention_s=0.0)
    # 3 passes x 7 hops x 2 MiB-per-layer K/V chunks (1024 x 1024 x 2 bytes) x 32 layers
    chunk = 8192 / 8 * 2 * 1024 * 2
    assert exposed == pytest.approx(32 * (3 * 7 * chunk / (12.5e9 * 0.8) + 30e-6), rel=0.01)


def test_a_stated_global_batch_caps_the_data_parallel_replicas() -> None:
    # Llama 2's 1,024 x 4k-token batch on 2,048 A100s (arXiv:2307.09288): pure data
    # parallelism would give each GPU half a sequence, so the search splits the model.
    raw = {"kind": "train", "model": "llama-2-7b", "tokens": "1B", "seq_len": 4096}
    shape = fit.Shape(usable_gib(0, A100), 8, 256, 1600.0)
    est = fit.estimate_shape(parse_workload({**raw, "global_batch": 1024}), shape, A100)
    assert est.layout is not None and est.layout.dp <= 1024
    free = fit.estimate_shape(parse_workload(raw), shape, A100)  # the default batch is a guess
    assert free.layout is not None and free.layout.dp == 2048


def test_megatron_recomputes_only_the_layers_memory_needs() -> None:
    # NeMo's Llama-2-70B LoRA recipe (8 H100, TP2 PP4, 4k packed): without recomputation
    # it needs ~79.5 GiB of 78.7; Megatron's block method recomputes a few layers per
    # chunk instead of all 80 (--recompute-method block --recompute-num-layers N).
    raw = {
        "kind": "lora",
        "model": "llama-2-70b",
        "tokens": "1B",
        "framework": "megatron",
        "precision": "fp8",
        "seq_len": 4096,
        "global_batch": 32,
        "micro_batch": 1,
        "tensor_parallel": 2,
        "pipeline_parallel": 4,
    }
    shape = fit.Shape(usable_gib(0, H100), 8, 1, 3200.0)
    auto = fit.estimate_shape(parse_workload(raw), shape, H100)
    full = fit.estimate_shape(parse_workload({**raw, "checkpointing": "full"}), shape, H100)
    assert auto.layout is not None and full.layout is not None
    assert auto.layout.checkpointing == "full" and auto.layout.recompute_layers >= 1
    assert full.layout.recompute_layers == 0  # a pinned 'full' recomputes every layer
    assert auto.hours is not None and full.hours is not None and auto.hours < full.hours
    assert auto.memory_gib <= shape.memory_gib < auto.memory_gib + 2.0  # just what fits
    fewer = replace(auto.layout, recompute_layers=auto.layout.recompute_layers - 1)
    if fewer.recompute_layers:
        assert sum(memory_breakdown(parse_workload(raw), fewer).values()) / GIB > shape.memory_gib
