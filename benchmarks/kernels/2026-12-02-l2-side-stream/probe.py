"""Probe: can o_proj's weight be pulled into L2 on a second stream while attention runs?

    PYTHONPATH=. python benchmarks/kernels/2026-12-02-l2-side-stream/probe.py --out probe.json

36 layers of Qwen3-8B decode shapes (bs 1, context 768, distinct weights per layer so
nothing stays in L2 between layers), each chain of steps captured in one CUDA graph and
replayed; microseconds per layer. A chain is "+"-joined steps:

    qkv, o, gu       the wqkv / wo GEMVs (kernels.gemv) and the gate_up matmul (cuBLAS)
    attn             the paged attention (split-K and its merge)
    bulkX@P, loadX@P the first X MB of wo fetched into L2 by P programs: `bulk` issues
                     cp.async.bulk.prefetch.L2 hints (../2026-12-02-l2-prefetch-probe/),
                     `load` reads the bytes with evict_last and discards them, so the
                     kernel ends only once they are in L2
    attn|S           attn on the main stream while step S runs on a side stream (a fork
                     and a join in the graph)

A leading "pdl:" launches the GEMVs and attention as programmatic dependent launches, as
the engine's decode step does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-12-02-l2-prefetch-probe"))
from prefetch import prefetch  # noqa: E402

from common.stamps import stamp  # noqa: E402
from kernels.gemv.kernel import gemv  # noqa: E402
from kernels.paged_attention.kernel import paged_attention  # noqa: E402
from kernels.timing import bench_us, copy_bandwidth  # noqa: E402

L, H, NH, NKV, D, CTX, FF = 36, 4096, 32, 8, 128, 768, 12288
MB = 1 << 20


@triton.jit
def _touch_kernel(w_ptr, n, sink_ptr, BLOCK: tl.constexpr):
    """Read w[:n] once (evict_last), this program's share of BLOCK-element chunks."""
    chunks = tl.cdiv(n, BLOCK)
    per = tl.cdiv(chunks, tl.num_programs(0))
    lo = tl.program_id(0) * per
    hi = tl.minimum(lo + per, chunks)
    acc = tl.zeros([BLOCK], tl.float32)
    for c in range(lo, hi):
        offs = c * BLOCK + tl.arange(0, BLOCK)  # n < 2**31 elements here
        acc += tl.load(w_ptr + offs, mask=offs < n, other=0.0,
                       eviction_policy="evict_last").to(tl.float32)
    total = tl.sum(acc, axis=0)
    if total == 1.2345e-30:  # never for these weights: keeps the loads live
        tl.store(sink_ptr, total)


def touch(w: torch.Tensor, nbytes: int, programs: int, sink: torch.Tensor) -> None:
    n = min(nbytes // w.element_size(), w.numel())
    _touch_kernel[(programs,)](w, n, sink, BLOCK=4096, num_warps=4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=g) * 0.02

    wqkv = [rand(H + 2 * NKV * D, H) for _ in range(L)]
    wo = [rand(H, H) for _ in range(L)]
    gu = [rand(2 * FF, H) for _ in range(L)]
    k_pool = rand(L, CTX + 8, NKV, D)
    v_pool = rand(L, CTX + 8, NKV, D)
    table = torch.arange(CTX, device=dev, dtype=torch.int32)[None]
    rows = torch.zeros(1, device=dev, dtype=torch.int64)
    pos = torch.full((1, 1), CTX - 1, device=dev, dtype=torch.int64)
    lens = torch.full((1,), CTX, device=dev, dtype=torch.int64)
    q = rand(1, 1, NH, D)
    x = rand(1, H)
    sink = torch.zeros(1, device=dev, dtype=torch.float32)
    side = torch.cuda.Stream()

    def step_fn(step: str, pdl: bool):
        m = re.fullmatch(r"(bulk|load)(\d+)@(\d+)", step)
        if m:
            kind, nbytes, programs = m[1], int(m[2]) * MB, int(m[3])
            if kind == "bulk":
                return lambda i: prefetch(wo[i].view(-1)[: nbytes // 2], programs=programs)
            return lambda i: touch(wo[i], nbytes, programs, sink)
        if step.startswith("attn|"):
            attn, other = step_fn("attn", pdl), step_fn(step[5:], pdl)

            def fork(i):
                main_stream = torch.cuda.current_stream()
                side.wait_stream(main_stream)
                with torch.cuda.stream(side):
                    other(i)
                attn(i)
                main_stream.wait_stream(side)
            return fork
        return {
            "qkv": lambda i: gemv(x, wqkv[i], pdl=pdl),
            "o": lambda i: gemv(x, wo[i], pdl=pdl),
            "gu": lambda i: torch.matmul(x, gu[i].t()),
            "attn": lambda i: paged_attention(q, k_pool[i], v_pool[i], table, rows, pos, lens,
                                              causal=True, pdl=pdl),
        }[step]

    def chain(spec: str):
        pdl = spec.startswith("pdl:")
        steps = [step_fn(s, pdl) for s in spec.removeprefix("pdl:").split("+")]

        def fn():
            for i in range(L):
                for s in steps:
                    s(i)
        return fn

    for w in (*wqkv, *wo):  # compile once, outside capture
        gemv(x, w)
    specs = ["o", "attn", "attn+o",
             "bulk16@32", "bulk16@32+o", "bulk24@32+o", "bulk32@32+o",
             "load8@132", "load16@132", "load8@132+o", "load16@132+o", "load24@132+o",
             "load32@132+o", "load16@32+o",
             "attn|bulk16@32+o", "attn|bulk24@32+o", "attn|load8@132+o", "attn|load16@132+o",
             "attn|load24@132+o", "attn|load16@32+o", "attn|load16@66+o",
             "qkv+attn+o+gu", "qkv+attn|load16@132+o+gu", "qkv+attn|load24@132+o+gu",
             "pdl:qkv+attn+o+gu", "pdl:qkv+attn|load16@132+o+gu",
             "pdl:qkv+attn|load24@132+o+gu", "pdl:qkv+attn|load16@66+o+gu"]
    out = {}
    for spec in specs:
        try:
            out[spec] = time_chain(chain(spec))
        except Exception as e:  # noqa: BLE001 - a probe: report and go on
            out[spec] = repr(e)[:300]
        print(f"{spec:40s} {out[spec]} us/layer", flush=True)
    rec = stamp(us_per_layer=out, layers=L, context=CTX,
                copy_tb_s=round(copy_bandwidth() / 1e12, 3))
    print(f"copy bandwidth {rec['copy_tb_s']} TB/s")
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
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    t = bench_us(graph.replay, warmup=50, rep=300)
    return round(t.p50 / L, 2)


if __name__ == "__main__":
    main()
