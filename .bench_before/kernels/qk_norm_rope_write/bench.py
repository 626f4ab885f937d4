"""Benchmark of `qk_norm_rope_write` on Qwen3-8B's layer shapes (nh=32, nkv=8, D=128, bf16).

    python -m kernels.bench --ops qk_norm_rope_write   # this op alone; without --ops: all

T tokens in {1 (AR decode), 16 (a DFlash verify block), 512 (a prefill)}, qkv (T, 6144) as
the wqkv GEMM leaves it, distinct random pool slots. Each row: the kernel against the eager
oracle (decoder_layer's op sequence), both as CUDA-graph replays (graph_us: the decode loop
runs in graphs), plus the same sequence through torch.compile (what the engine runs with fused_qk
off, Inductor's ~5 kernels) in `extra`. Bytes: qkv read, q written, K and V written, cos/sin and
slots read. At T = 1 the op is launch bound: the number to beat is the compiled sequence's
graph time (~5 launches), the floor is one launch. A (heads per program x warps) sweep at
T = 1 and T = 512 goes to `extra` of those rows.
"""

from __future__ import annotations

import torch

from kernels.compare import close, merge
from kernels.qk_norm_rope_write.kernel import qk_norm_rope_write
from kernels.qk_norm_rope_write.ref import qk_norm_rope_write_ref
from kernels.timing import Row, graph_us

NH, NKV, HEAD_DIM = 32, 8, 128
DTYPE, DEVICE = torch.bfloat16, "cuda"
TOKENS = (1, 16, 512)
SWEEP = ((4, 2), (8, 2), (8, 4), (16, 4), (64, 8))  # (block_heads, num_warps)
KW = dict(num_heads=NH, eps=1e-6)


def make_inputs(tokens: int, seed: int = 0, device: str = DEVICE, dtype=DTYPE):
    """(args, kwargs) of qk_norm_rope_write for `tokens` tokens."""
    g = torch.Generator(device=device).manual_seed(seed)
    slots = 2 * tokens + 64
    angle = torch.rand(tokens, HEAD_DIM // 2, device=device, generator=g) * 6.3
    args = (
        torch.randn(tokens, (NH + 2 * NKV) * HEAD_DIM, device=device, generator=g).to(dtype),
        (1 + 0.2 * torch.randn(HEAD_DIM, device=device, generator=g)).to(dtype),
        (1 + 0.2 * torch.randn(HEAD_DIM, device=device, generator=g)).to(dtype),
        torch.cat([angle.cos(), angle.sin()], dim=1),
        torch.randperm(slots, device=device, generator=g)[:tokens],
        torch.randn(slots, NKV, HEAD_DIM, device=device, generator=g).to(dtype),
        torch.randn(slots, NKV, HEAD_DIM, device=device, generator=g).to(dtype),
    )
    return args, dict(KW)


def nbytes(tokens: int) -> int:
    width = (NH + 2 * NKV) * HEAD_DIM
    return tokens * (2 * width * 2 + HEAD_DIM * 4 + 8)  # qkv in, q+K+V out, cos/sin, slot


# kernels.check's cases (on the CPU: the interpreter)
CHECKS = ((7,),)
BENCH_CHECK = (7,)  # kernels.bench's check on CUDA before timing


def check(dev: str, tokens: int) -> tuple:
    """kernels.check-style tuple: one irregular T against the oracle (2x rule, bf16)."""
    args, kw = make_inputs(tokens, seed=1, device=dev)
    got = list(args)
    got[5], got[6] = args[5].clone(), args[6].clone()
    q = qk_norm_rope_write(*got, **kw)
    fp32 = [a.float() if a.is_floating_point() else a for a in args]
    fp32[5], fp32[6] = fp32[5].clone(), fp32[6].clone()
    q32 = qk_norm_rope_write_ref(*fp32, **kw)
    low = list(args)
    low[5], low[6] = args[5].clone(), args[6].clone()
    ql = qk_norm_rope_write_ref(*low, **kw)
    parts = [close(a, b, c) for a, b, c in ((q, q32, ql), (got[5], fp32[5], low[5]),
                                             (got[6], fp32[6], low[6]))]
    return merge("qk_norm_rope_write", f"T={tokens} nh={NH} nkv={NKV} D={HEAD_DIM}",
                  "bfloat16", parts)


def run(ctx) -> list[Row]:
    """One row per T; target: faster than the torch.compile'd sequence it replaces.
    (ctx, a kernels.bench.BenchContext, is not needed here.)"""
    compiled = torch.compile(qk_norm_rope_write_ref, dynamic=False)
    rows = []
    for tokens in TOKENS:
        args, _ = make_inputs(tokens)
        k = graph_us(lambda a=args: qk_norm_rope_write(*a, **KW))
        o = graph_us(lambda a=args: qk_norm_rope_write_ref(*a, **KW))
        c = graph_us(lambda a=args: compiled(*a, **KW))
        extra = dict(compiled_graph_us=c.p50)
        if tokens in (1, 512):
            extra["sweep_us"] = {
                f"heads={h} warps={w}": graph_us(
                    lambda a=args, h=h, w=w: qk_norm_rope_write(*a, **KW, block_heads=h,
                                                                num_warps=w)).p50
                for h, w in SWEEP}
        rows.append(Row("qk_norm_rope_write", f"T={tokens} (compiled {c.p50:.2f} us)",
                        "bfloat16", k, o, nbytes(tokens), extra, "< compiled sequence",
                        k.p50 < c.p50))
    return rows
