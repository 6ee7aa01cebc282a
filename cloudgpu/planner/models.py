"""Model architectures the planner sizes: a bundled table of open models, explicit blocks,
and a documented rule that infers a shape from a parameter count alone.

This module only describes shapes and counts parameters; it must not estimate memory or
time (memory.py, timing.py do) nor read anything but its own bundled data file.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from cloudgpu.errors import ConfigError


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer (Llama-style: gated MLP, RMSNorm, RoPE, optional GQA/MoE)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int  # per expert for MoE
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    experts: int = 1
    experts_active: int = 1
    tied: bool = False
    params: float = 0.0  # total parameters; 0: counted from the shape
    source: str = ""
    inferred: bool = False  # shape guessed from a parameter count (see arch_from_params)

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.hd

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.hd

    def layer_params(self, experts: int | None = None) -> float:
        """Weights of one transformer block (attention, ``experts`` MLPs, router, norms)."""
        n_exp = self.experts if experts is None else experts
        attn = self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate * n_exp
        router = self.hidden * self.experts if self.experts > 1 else 0
        return float(attn + mlp + router + 2 * self.hidden)

    def embedding_params(self) -> float:
        return float(self.vocab * self.hidden * (1 if self.tied else 2))

    @property
    def total_params(self) -> float:
        if self.params:
            return self.params
        return self.layers * self.layer_params() + self.embedding_params() + self.hidden

    @property
    def active_params(self) -> float:
        """Parameters one token passes through (MoE: only the routed experts)."""
        if self.experts <= 1:
            return self.total_params
        dense = self.layers * self.layer_params(self.experts_active) + self.embedding_params()
        return min(self.total_params, dense)

    def lora_params(self, rank: int, targets: str) -> float:
        """Trainable adapter parameters: r x (d_in + d_out) per adapted matrix."""
        h = self.hidden
        if targets == "qv":
            return float(self.layers * rank * ((h + self.q_dim) + (h + self.kv_dim)))
        attn = rank * ((h + self.q_dim) * 2 + (h + self.kv_dim) * 2)
        if targets == "attention":
            return float(self.layers * attn)
        mlp = rank * 3 * (h + self.intermediate) * self.experts
        return float(self.layers * (attn + mlp))


@lru_cache(maxsize=1)
def _table() -> dict[str, ModelArch]:
    raw = json.loads(resources.files("cloudgpu.planner.data").joinpath("models.json").read_text())
    table: dict[str, ModelArch] = {}
    for row in raw["models"]:
        arch = ModelArch(
            name=row["name"],
            layers=row["layers"],
            hidden=row["hidden"],
            heads=row["heads"],
            kv_heads=row["kv_heads"],
            intermediate=row["intermediate"],
            vocab=row["vocab"],
            head_dim=row["head_dim"],
            experts=row["experts"],
            experts_active=row["experts_active"],
            tied=row["tied"],
            params=row["params_b"] * 1e9,
            source=row["source"],
        )
        for key in (row["name"], *row["aliases"]):
            table[_norm(key)] = arch
    return table


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-").split("/")[-1]


def known_models() -> list[str]:
    return sorted({arch.name for arch in _table().values()})


def lookup_model(name: str, *, key: str = "workload.model") -> ModelArch:
    """The bundled architecture called ``name`` (aliases, case and an org/ prefix forgiven)."""
    table = _table()
    arch = table.get(_norm(name))
    if arch is not None:
        return arch
    close = difflib.get_close_matches(_norm(name), list(table), n=3, cutoff=0.5)
    names = sorted({table[c].name for c in close})
    hint = f"did you mean {', '.join(names)}?" if names else None
    raise ConfigError(
        f"{key}: unknown model '{name}' (known: {', '.join(known_models())})",
        hint=hint or "give params: (e.g. 8B) or an arch: block instead",
    )


# The params-only rule: a Llama-style shape whose depth follows the published
# Llama/Llama-2/Llama-3 family, so a bare "params: 13B" gets a plausible depth and width
# for activations and KV cache:
#   layers from the table below; hidden solves P = 12*layers*hidden^2 + 2*32000*hidden
#   (12 h^2 per block: 4 h^2 attention + a gated MLP of 8/3 h; untied 32k embeddings),
#   rounded to a multiple of 128; heads = hidden / 128; kv_heads = heads (no GQA
#   assumed, the conservative choice for KV cache); intermediate = 8/3 * hidden rounded
#   up to 256; vocab 32000. Llama-2 7B and 13B come out exactly (32 x 4096, 40 x 5120).
# Only the parameter count itself is then used for weights, gradients and FLOPs.
_DEPTH_BY_SIZE = ((1.5e9, 16), (4e9, 26), (10e9, 32), (20e9, 40), (45e9, 60), (100e9, 80))
_VOCAB = 32000


def arch_from_params(params: float, name: str = "") -> ModelArch:
    """Infer a shape from a parameter count alone (rule above; marked ``inferred``)."""
    if params <= 0:
        raise ConfigError("workload.params: must be a positive count such as 8B or 350M")
    layers = next((d for limit, d in _DEPTH_BY_SIZE if params <= limit), 126)
    a, b = 12.0 * layers, 2.0 * _VOCAB
    width = (-b + math.sqrt(b * b + 4 * a * params)) / (2 * a)
    hidden = max(128, 128 * round(width / 128))
    heads = max(1, hidden // 128)
    inter = 256 * math.ceil(hidden * 8 / 3 / 256)
    return ModelArch(
        name=name or f"{params / 1e9:g}B (inferred)",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        intermediate=inter,
        vocab=_VOCAB,
        params=params,
        source="inferred from params",
        inferred=True,
    )


_ARCH_KEYS = ("layers", "hidden", "heads", "vocab")


def arch_from_block(block: dict[str, Any], params: float | None) -> ModelArch:
    """An explicit ``arch:`` block; missing required keys are named in the error."""
    missing = [k for k in _ARCH_KEYS if k not in block]
    if missing:
        raise ConfigError(
            f"workload: architecture missing {', '.join(missing)} (needs layers, hidden, heads,"
            " vocab; optional kv_heads, intermediate, head_dim, experts, experts_active, tied)"
        )
    try:
        hidden = int(block["hidden"])
        arch = ModelArch(
            name=str(block.get("name", "custom")),
            layers=int(block["layers"]),
            hidden=hidden,
            heads=int(block["heads"]),
            kv_heads=int(block.get("kv_heads", block["heads"])),
            # default: the gated MLP with as many weights as a GPT 4h MLP (8/3 h x 3)
            intermediate=int(block.get("intermediate", 256 * math.ceil(hidden * 8 / 3 / 256))),
            vocab=int(block["vocab"]),
            head_dim=int(block.get("head_dim", 0)),
            experts=int(block.get("experts", 1)),
            experts_active=int(block.get("experts_active", 1)),
            tied=bool(block.get("tied", False)),
            params=params or 0.0,
            source="arch block",
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"workload.arch: every size must be a whole number ({exc})") from exc
    if min(arch.layers, arch.hidden, arch.heads, arch.kv_heads, arch.vocab) <= 0:
        raise ConfigError("workload.arch: layers, hidden, heads, kv_heads, vocab must be > 0")
    if arch.heads % arch.kv_heads:
        raise ConfigError("workload.arch: heads must be a multiple of kv_heads")
    return arch


def with_params(arch: ModelArch, params: float | None) -> ModelArch:
    """``arch`` with an explicit parameter count when the job states one."""
    return replace(arch, params=params) if params else arch
