"""Benchmark of `gemv` against cuBLAS on Qwen3-8B's decode projections (bf16).

    python -m kernels.bench --ops gemv

Shapes (N, K): wqkv 6144x4096, wo 4096x4096, gate_up 24576x4096, down 4096x12288; rows
M in {1 (AR decode), 4, 16 (a bs-1 verify block)}. Each row: the tuned kernel (tune.tune on
these weights; the config is in the shape) against `torch.matmul(x, w.t())` (cuBLAS, the
`oracle` columns here), both as CUDA-graph replays (graph_us: the decode loop runs in
graphs) cycling through enough copies of W (>= 3x the 50 MB L2) that every call streams
from HBM, as a decode step does. Bytes: W once, x, y. The target is the kernel faster
than cuBLAS, near the HBM copy bandwidth (about 4.1 TB/s on an H200; the measured rows are
in the H200 runs' READMEs under benchmarks/). `extra` keeps TB/s of both, do_bench (L2
flushed) views and the tuning table. The tuning also times split-K configs (split_k.py) at
the narrow shapes wqkv, wo and down (tune.split_candidates); a split winner shows "skS" in
its config.
"""

from __future__ import annotations

import torch

from kernels.compare import close, merge
from kernels.gemv import tune
from kernels.gemv.kernel import gemv
from kernels.gemv.ref import gemv_ref
from kernels.gemv.shared import GemvConfig, default_config
from kernels.timing import Row, bench_us

SHAPES = {"wqkv": (6144, 4096), "wo": (4096, 4096), "gate_up": (24576, 4096),
          "down": (4096, 12288)}
ROWS = (1, 4, 16)
DTYPE, DEVICE = torch.bfloat16, "cuda"
TUNING = tune.GemvTuning()  # graph-timed, cuBLAS may win: the engine's default tuning


def nbytes(m: int, n: int, k: int, elem: int = 2) -> int:
    return elem * (n * k + m * k + m * n)


def weight(n: int, k: int, seed: int = 0, device: str = DEVICE) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(n, k, device=device, generator=g) / k**0.5).to(DTYPE)


# kernels.check's cases (on the CPU: the interpreter)
CHECKS = ((5, 100, 77),)
BENCH_CHECK = (7, 1000, 777)  # kernels.bench's check on CUDA before timing


def check(dev: str, m: int, n: int, k: int) -> tuple:
    """kernels.check-style tuple: one irregular shape against the oracle (2x rule, bf16)."""
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(m, k, device=dev, generator=g).to(DTYPE)
    w = torch.randn(n, k, device=dev, generator=g).to(DTYPE)
    configs = (default_config(m, n, k), tune.DOT_CANDIDATES[0], tune.FMA_CANDIDATES[2],
               GemvConfig(32, 128, 4, 3, True, 3), GemvConfig(16, 256, 4, 3, False, 2))
    parts = [close(gemv(x, w, config=c), x.float() @ w.float().t(), x @ w.t()) for c in configs]
    parts.append(close(gemv(x, w), x.float() @ w.float().t(), gemv_ref(x, w)))
    return merge("gemv", f"M={m} N={n} K={k} (default, dot, fma, split-K dot sk3 and fma "
                  "sk2, tuned)", "bfloat16", parts)


def _row(name: str, m: int, ws: list[torch.Tensor]) -> Row:
    w = ws[0]
    n, k = w.shape
    x = torch.randn(m, k, device=DEVICE).to(DTYPE)
    y = torch.empty(m, n, device=DEVICE, dtype=DTYPE)
    cfg = tune.tune(x, w, tuning=TUNING)
    key = tune.key_of(m, n, k, w, TUNING)
    tune.CONFIGS[key] = cfg
    mine = tune.streamed(lambda v: gemv(x, v, config=cfg, out=y), ws, calls=100)
    cublas = tune.streamed(lambda v: torch.matmul(x, v.t()), ws, calls=100)
    size = nbytes(m, n, k)
    extra = dict(config=str(cfg), tbps=size / mine.p50 / 1e6, cublas_tbps=size / cublas.p50 / 1e6,
                 bench_us=bench_us(lambda: gemv(x, w, config=cfg, out=y)).p50,
                 cublas_bench_us=bench_us(lambda: torch.matmul(x, w.t())).p50,
                 tune_us=tune.TUNE_LOG[key], tuned_in_graph=TUNING.graph)
    return Row("gemv", f"{name} {n}x{k} M={m} [{cfg}] vs cuBLAS", "bfloat16", mine, cublas,
               size, extra, "< cuBLAS (~4.1 TB/s)", mine.p50 < cublas.p50)


def run(ctx) -> list[Row]:
    """One row per (projection, M): tuned kernel vs cuBLAS, graph replays streaming W.
    (ctx, a kernels.bench.BenchContext, is not needed here.)"""
    rows = []
    for name, (n, k) in SHAPES.items():
        ws = tune.l2_copies(weight(n, k))
        rows += [_row(name, m, ws) for m in ROWS]
        del ws
        torch.cuda.empty_cache()
    return rows

