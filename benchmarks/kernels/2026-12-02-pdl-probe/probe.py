"""Probe: do programmatic dependent launches (PDL) shorten a chain of decode kernels?

    PYTHONPATH=. python benchmarks/kernels/2026-12-02-pdl-probe/probe.py --out probe.json

36 layers of Qwen3-8B decode shapes (bs 1, context 768, distinct weights per layer), the
output of each kernel feeding the next: wqkv GEMV -> paged attention (+ its split-K merge)
-> wo GEMV -> gate_up matmul -> down GEMV (the gate half of gate_up stands in for the SwiGLU,
so every kernel is ours or cuBLAS, none Inductor's). Each chain is captured in one CUDA graph
and replayed; microseconds per layer, PDL off and on for our Triton kernels. The final
hidden state must be bitwise the same both ways (PDL changes when a kernel starts, never
what it reads).
"""

from __future__ import annotations

import argparse
import json

import torch

from common.stamps import stamp
from kernels.gemv.kernel import gemv
from kernels.paged_attention.kernel import paged_attention
from kernels.timing import bench_us

L, H, NH, NKV, D, CTX, FF = 36, 4096, 32, 8, 128, 768, 12288


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16

    def w(n, k):
        return [torch.randn(n, k, device=dev, dtype=dt) * k**-0.5 for _ in range(L)]

    wqkv, wo, gu, down = w(NH * D + 2 * NKV * D, H), w(H, H), w(2 * FF, H), w(H, FF)
    k_pool = torch.randn(L, CTX + 8, NKV, D, device=dev, dtype=dt)
    v_pool = torch.randn_like(k_pool)
    table = torch.arange(CTX, device=dev, dtype=torch.int32)[None]
    rows = torch.zeros(1, device=dev, dtype=torch.int64)
    pos = torch.full((1, 1), CTX - 1, device=dev, dtype=torch.int64)
    lens = torch.full((1,), CTX, device=dev, dtype=torch.int64)
    x0 = torch.randn(1, H, device=dev, dtype=dt)

    def chain(pdl: bool, parts: str, triton_gu: bool):
        def fn():
            x = x0
            for i in range(L):
                if "qkv" in parts:
                    x = gemv(x, wqkv[i], pdl=pdl)[:, :NH * D]
                if "attn" in parts:
                    x = paged_attention(x.reshape(1, 1, NH, D), k_pool[i], v_pool[i], table,
                                        rows, pos, lens, causal=True, pdl=pdl).reshape(1, H)
                if "o" in parts:
                    x = gemv(x, wo[i], pdl=pdl)
                if "mlp" in parts:
                    g = gemv(x, gu[i], pdl=pdl) if triton_gu else torch.matmul(x, gu[i].t())
                    x = gemv(g[:, :FF], down[i], pdl=pdl)
            return x
        return fn

    out, finals = {}, {}
    for parts in ("qkv+attn+o+mlp", "qkv+o+mlp", "attn+o", "o"):
        for triton_gu in ((False, True) if "mlp" in parts else (False,)):
            for pdl in (False, True):
                name = f"{parts}{' triton_gu' if triton_gu else ''} pdl={int(pdl)}"
                try:
                    t, final = time_chain(chain(pdl, parts, triton_gu))
                    out[name] = t
                    finals[name] = final
                except Exception as e:  # noqa: BLE001 - a probe: report and go on
                    out[name] = repr(e)[:300]
                print(f"{name:40s} {out[name]} us/layer", flush=True)
    same = {}
    for name in finals:
        if name.endswith("pdl=1"):
            off = name[:-1] + "0"
            if off in finals:
                same[name[:-6]] = bool(torch.equal(finals[name], finals[off]))
    print("bitwise same with PDL:", same, flush=True)
    rec = stamp(us_per_layer=out, bitwise_same=same, layers=L, context=CTX)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1)


def time_chain(fn) -> tuple[float, torch.Tensor]:
    """(microseconds per layer of fn's L layers captured in one CUDA graph, its output)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fn()
    g.replay()
    torch.cuda.synchronize()
    final = y.clone()
    t = bench_us(g.replay, warmup=50, rep=300)
    return round(t.p50 / L, 2), final


if __name__ == "__main__":
    main()
