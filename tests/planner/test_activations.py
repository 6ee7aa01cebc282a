"""The activation accounting (planner/memory.py) against what PyTorch's autograd really
keeps: a Llama block written the way eager codebases write it (fp32-upcast RMSNorm,
rotate-half RoPE by constant cos/sin, SDPA, gated SiLU MLP), run in bf16 on the CPU
build of torch, every tensor autograd saves for backward counted once per storage."""

from __future__ import annotations

from typing import Any

import pytest

from cloudgpu.planner.memory import Layout, layer_activation_bytes
from cloudgpu.planner.workload import parse_workload

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

# Llama-3-8B's proportions (GQA 4:1, ffn 3.5 x hidden) at a size the CPU runs at once.
H, HEADS, KV_HEADS, INTER, SEQ, BATCH = 512, 8, 2, 1792, 256, 2
HEAD = H // HEADS


class _RMSNorm(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H, dtype=torch.bfloat16))

    def forward(self, x: Any) -> Any:
        x32 = x.to(torch.float32)
        var = x32.pow(2).mean(-1, keepdim=True)
        return self.weight * (x32 * torch.rsqrt(var + 1e-5)).to(x.dtype)


def _rotate_half(x: Any) -> Any:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Block(nn.Module):  # type: ignore[misc]
    def __init__(self, repeat_kv: bool) -> None:
        super().__init__()
        bf16 = {"bias": False, "dtype": torch.bfloat16}
        self.repeat_kv = repeat_kv
        self.n1, self.n2 = _RMSNorm(), _RMSNorm()
        self.q = nn.Linear(H, H, **bf16)
        self.k = nn.Linear(H, KV_HEADS * HEAD, **bf16)
        self.v = nn.Linear(H, KV_HEADS * HEAD, **bf16)
        self.o = nn.Linear(H, H, **bf16)
        self.gate = nn.Linear(H, INTER, **bf16)
        self.up = nn.Linear(H, INTER, **bf16)
        self.down = nn.Linear(INTER, H, **bf16)
        angle = torch.arange(SEQ).float()[:, None] * torch.arange(HEAD).float()[None] / HEAD
        self.register_buffer("cos", angle.cos().to(torch.bfloat16))
        self.register_buffer("sin", angle.sin().to(torch.bfloat16))

    def _heads(self, t: Any, n: int) -> Any:
        return t.view(BATCH, SEQ, n, HEAD).transpose(1, 2)

    def forward(self, x: Any) -> Any:
        y = self.n1(x)
        q, k = self._heads(self.q(y), HEADS), self._heads(self.k(y), KV_HEADS)
        v = self._heads(self.v(y), KV_HEADS)
        q = q * self.cos + _rotate_half(q) * self.sin
        k = k * self.cos + _rotate_half(k) * self.sin
        if self.repeat_kv:  # as transformers' repeat_kv: expand, then a copy
            shape = (BATCH, KV_HEADS, HEADS // KV_HEADS, SEQ, HEAD)
            k = k[:, :, None].expand(shape).reshape(BATCH, HEADS, SEQ, HEAD)
            v = v[:, :, None].expand(shape).reshape(BATCH, HEADS, SEQ, HEAD)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(out.transpose(1, 2).contiguous().view(BATCH, SEQ, H))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def _saved_bytes(block: Any) -> int:
    """Bytes of every distinct storage autograd saves in one forward, weights aside."""
    skip = {p.untyped_storage().data_ptr() for p in block.parameters()}
    skip |= {b.untyped_storage().data_ptr() for b in block.buffers()}
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    x = torch.randn(BATCH, SEQ, H, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x).sum().backward()
    return sum(seen.values())


@pytest.mark.parametrize(("framework", "repeat_kv"), [("hf-trainer", True), ("megatron", False)])
def test_one_layer_keeps_what_autograd_saves(framework: str, repeat_kv: bool) -> None:
    torch.manual_seed(0)
    measured = _saved_bytes(_Block(repeat_kv))
    w = parse_workload(
        {
            "kind": "train",
            "framework": framework,
            "arch": {
                "layers": 1,
                "hidden": H,
                "heads": HEADS,
                "kv_heads": KV_HEADS,
                "intermediate": INTER,
                "vocab": 32000,
            },
            "tokens": "1M",
            "seq_len": SEQ,
        }
    )
    modelled = layer_activation_bytes(w.arch, w, Layout(1, micro_batch=BATCH), "flash")
    # The softmax statistics (4 bytes per head per token) are the only tensor left out.
    assert modelled == pytest.approx(measured, rel=0.01)
