"""Probe: do programmatic dependent launches (PDL) shorten a chain of decode kernels?

    git checkout 5fcd5ca   # the tree with the probe's TRIGGER_FIRST and PREFETCH_W switches
    PYTHONPATH=. python benchmarks/kernels/2026-12-02-pdl-probe/probe.py --out probe.json

36 layers of Qwen3-8B decode shapes (bs 1, context 768, distinct weights per layer), the
output of each kernel feeding the next. A chain names its steps: qkv (wqkv GEMV), attn
(paged attention and its split-K merge), o (wo GEMV), gu (gate_up on cuBLAS, its gate half
feeding down), down (down GEMV), n (one elementwise kernel that is not ours, standing in
for Inductor's norms and SwiGLU). Each chain is captured in one CUDA graph and replayed;
microseconds per layer under each mode: off; pdl (each of our kernels waits, then lets the
next launch); pdl+trigger_first (lets the next launch, then waits); pdl+prefetch (a GEMV
asks L2 for its rows of W before it waits). The final hidden state must be bitwise the same
as with PDL off (PDL changes when a kernel starts, never what it reads). From the commit
after 5fcd5ca on, the two probe switches are gone and the modes beyond pdl set nothing.
"""

from __future__ import annotations

import argparse
import json

import torch

from common.stamps import stamp
from kernels import pdl as pdl_mod
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

    def chain(pdl: bool, parts: str):
        steps = parts.split("+")

        def fn():
            x = x0
            for i in range(L):
                for step in steps:
                    if step == "qkv":
                        x = gemv(x, wqkv[i], pdl=pdl)[:, :NH * D]
                    elif step == "attn":
                        x = paged_attention(x.reshape(1, 1, NH, D), k_pool[i], v_pool[i],
                                            table, rows, pos, lens, causal=True,
                                            pdl=pdl).reshape(1, H)
                    elif step == "o":
                        x = gemv(x, wo[i], pdl=pdl)
                    elif step == "gu":  # cuBLAS, then the gate half feeds down
                        x = torch.matmul(x, gu[i].t())[:, :FF]
                    elif step == "down":
                        x = gemv(x, down[i], pdl=pdl)
                    elif step == "n":  # one elementwise kernel of ours-not (as Inductor's)
                        x = x * 1.0
            return x
        return fn

    modes = {"off": (False, False, False), "pdl": (True, False, False),
             "pdl+trigger_first": (True, True, False), "pdl+prefetch": (True, False, True),
             "pdl+trigger_first+prefetch": (True, True, True)}
    chains = ("qkv+n+attn+o+n+gu+n+down+n", "qkv+attn+o+gu+down", "attn+o", "n+o", "o")
    out, finals = {}, {}
    for parts in chains:
        for mode, (pdl, first, prefetch) in modes.items():
            pdl_mod.TRIGGER_FIRST, pdl_mod.PREFETCH_W = first, prefetch
            name = f"{parts} {mode}"
            try:
                t, final = time_chain(chain(pdl, parts))
                out[name] = t
                finals[name] = final
            except Exception as e:  # noqa: BLE001 - a probe: report and go on
                out[name] = repr(e)[:300]
            print(f"{name:50s} {out[name]} us/layer", flush=True)
    same = {name: bool(torch.equal(finals[name], finals[name.rsplit(" ", 1)[0] + " off"]))
            for name in finals if not name.endswith(" off")
            and name.rsplit(" ", 1)[0] + " off" in finals}
    print("bitwise same as off:", same, flush=True)
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
