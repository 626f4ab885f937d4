"""Probe: does an L2 prefetch issued before a layer's attention shorten the o_proj GEMV after it?

    PYTHONPATH=. python benchmarks/kernels/2026-12-02-l2-prefetch-probe/probe.py --out probe.json

36 layers of Qwen3-8B decode shapes (bs 1, context 768): per layer, each chain of `specs`
("+"-joined steps: line / bulk prefetch of o_proj's weight, bulk prefetch of 16 MB of
gate_up's, the paged attention, the o_proj GEMV, the gate_up matmul), captured in one CUDA
graph and replayed; microseconds per layer.
"""

from __future__ import annotations

import argparse
import json

import torch
from prefetch import prefetch

from common.stamps import stamp
from kernels.gemv.kernel import gemv
from kernels.paged_attention.kernel import paged_attention
from kernels.timing import bench_us

L, H, NH, NKV, D, CTX = 36, 4096, 32, 8, 128, 768


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    wo = [torch.randn(H, H, device=dev, dtype=dt) * 0.02 for _ in range(L)]
    gu = [torch.randn(2 * 12288, H, device=dev, dtype=dt) * 0.02 for _ in range(L)]
    k_pool = torch.randn(L, CTX + 8, NKV, D, device=dev, dtype=dt)
    v_pool = torch.randn_like(k_pool)
    table = torch.arange(CTX, device=dev, dtype=torch.int32)[None]
    rows = torch.zeros(1, device=dev, dtype=torch.int64)
    pos = torch.full((1, 1), CTX - 1, device=dev, dtype=torch.int64)
    lens = torch.full((1,), CTX, device=dev, dtype=torch.int64)
    q = torch.randn(1, 1, NH, D, device=dev, dtype=dt)
    x = torch.randn(1, H, device=dev, dtype=dt)
    for w in wo:  # tune once, outside capture
        gemv(x, w)

    steps = {
        "line": lambda i: prefetch(wo[i], bulk=False),
        "bulk": lambda i: prefetch(wo[i], bulk=True),
        "bulk_gu": lambda i: prefetch(gu[i][:2048], bulk=True),  # first 16 MB of gate_up
        "attn": lambda i: paged_attention(q, k_pool[i], v_pool[i], table, rows, pos, lens,
                                          causal=True),
        "gemv": lambda i: gemv(x, wo[i]),
        "gate_up": lambda i: torch.matmul(x, gu[i].t()),
    }

    def chain(spec: str):
        def fn():
            for i in range(L):
                for step in spec.split("+"):
                    steps[step](i)
        return fn

    specs = ["attn+gemv", "line+attn+gemv", "bulk+attn+gemv", "attn", "gemv", "bulk+attn",
             "bulk+gemv", "attn+gemv+gate_up", "bulk+attn+gemv+gate_up",
             "bulk+bulk_gu+attn+gemv+gate_up", "gate_up", "bulk_gu+attn+gate_up",
             "attn+gate_up"]
    variants = {spec: chain(spec) for spec in specs}
    out = {}
    for name, fn in variants.items():
        try:
            out[name] = time_chain(fn)
        except Exception as e:  # noqa: BLE001 - a probe: report and go on
            out[name] = repr(e)[:300]
        print(f"{name:45s} {out[name]} us/layer", flush=True)
    rec = stamp(us_per_layer=out, layers=L, context=CTX)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1)


def time_chain(fn) -> float:
    """Microseconds per layer of fn's L layers, captured in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    t = bench_us(g.replay, warmup=50, rep=300)
    return round(t.p50 / L, 2)


if __name__ == "__main__":
    main()
