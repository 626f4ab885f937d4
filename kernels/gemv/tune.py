"""One-time tuning of `gemv`'s launch config per (N, K, M bucket, dtype, device).

`config_for` is what the launcher (kernel.py) asks; candidates run through `launch`
(launch.py), never through the launcher, so the imports run one way. On CUDA, the first call
of a key outside CUDA-graph capture times every candidate on the call's own x and W
(triton.testing.do_bench, L2 flushed before each run, median) and caches the fastest in
CONFIGS; later calls, including those being captured, reuse it. A key first met during
capture cannot be timed (no sync allowed): it gets `default_config` (not cached, with a
warning), so warm up first: the engine's GraphCache runs each graph's function twice before
capturing it, and `warm_up` tunes a list of weights explicitly. The CPU (interpreter) always
takes the default. TUNE_LOG keeps every timing for the bench. How to tune is the caller's
`GemvTuning` (the engine passes its EngineOptions' gemv_* fields), part of the cache key:
- `tune=False`: no tuning, the default config (deterministic).
- `graph`: each candidate (and cuBLAS) is timed as the decode graph runs it (`streamed`,
  CUDA-graph replays cycling copies of W past L2); False: do_bench, an L2 flush before each
  call, which mis-ranks the small o_proj and wqkv GEMVs.
- `cublas_fallback`: the tuning also times cuBLAS (torch.matmul) on the same call; where it
  beats every candidate the key caches None and the launcher calls cuBLAS instead. False
  keeps the Triton kernel whatever the timings.
Candidates (`candidates(m, n, k)`): the unsplit DOT_CANDIDATES, FMA_CANDIDATES at M <= 4, and
at narrow N (o_proj, down_proj, wqkv) up to 11 split-K configs (`split_candidates`). Split-K
candidates exist because narrow-N, long-K projections leave most SMs idle with one program
per N tile walking all of K; each timed candidate costs ~25 ms of GPU time, so they are
offered only where the unsplit grid is short of programs.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable

import torch

from common.buckets import cdiv, round_up
from kernels.gemv.launch import launch
from kernels.gemv.shared import GemvConfig, default_config
from kernels.gemv.tuning import DEFAULT_TUNING, GemvTuning

L2_BYTES = 50 << 20  # an H200's L2 is 50 MB
DOT_CANDIDATES = (
    GemvConfig(16, 256, 4, 4, True), GemvConfig(16, 256, 4, 6, True),
    GemvConfig(16, 512, 4, 3, True), GemvConfig(16, 512, 4, 4, True),
    GemvConfig(16, 512, 8, 4, True), GemvConfig(16, 1024, 4, 3, True),
    GemvConfig(16, 1024, 8, 2, True), GemvConfig(32, 512, 4, 3, True),
)
FMA_CANDIDATES = (  # only for M <= FMA_MAX_ROWS
    GemvConfig(4, 512, 2, 3, False), GemvConfig(4, 1024, 4, 3, False),
    GemvConfig(8, 512, 4, 3, False), GemvConfig(8, 512, 4, 4, False),
    GemvConfig(8, 1024, 4, 2, False), GemvConfig(8, 1024, 8, 3, False),
    GemvConfig(16, 512, 4, 3, False), GemvConfig(16, 256, 4, 4, False),
)
FMA_MAX_ROWS = 4
SPLIT_BASES = (  # (block_n, block_k, num_warps, num_stages, dot), each at split_k SPLIT_KS
    (16, 512, 4, 3, False), (16, 256, 4, 4, False), (32, 256, 4, 3, False),  # M <= 4 only
    (16, 512, 4, 3, True), (32, 512, 4, 3, True), (64, 256, 4, 3, True),
)
SPLIT_KS = (2, 4, 8)
SMS = 132  # an H200's SMs: split-K candidates keep 2 to 8 programs per SM
CONFIGS: dict[tuple, GemvConfig | None] = {}  # None: cuBLAS was faster
TUNE_LOG: dict[tuple, dict[str, float]] = {}  # key -> {str(config): us, "cublas": us}
_warned: set[tuple] = set()


def m_bucket(m: int) -> int:
    """1, 2, 4, 8, 16, then multiples of 16: calls in one bucket share a config."""
    if m <= 16:
        return 1 << max(m - 1, 0).bit_length()
    return round_up(m, 16)


def key_of(m: int, n: int, k: int, w: torch.Tensor,
           tuning: GemvTuning = DEFAULT_TUNING) -> tuple:
    """(N, K, M bucket, dtype, device, graph-timed, cuBLAS fallback): the cache key."""
    return (n, k, m_bucket(m), str(w.dtype).removeprefix("torch."), str(w.device),
            tuning.graph, tuning.cublas_fallback)


def split_candidates(m: int, n: int, k: int) -> tuple[GemvConfig, ...]:
    """Split-K configs worth timing at (M, N, K): none where N is wide (cdiv(N, 16) >= 4*SMS:
    the unsplit kernel has enough programs); else every SPLIT_BASES entry (fma ones only for
    M <= FMA_MAX_ROWS) at each split_k in SPLIT_KS that gives 2*SMS to 8*SMS programs
    (cdiv(N, block_n) * split_k) with slices of at least one K chunk (K >= split_k * block_k).
    Qwen3-8B at M <= 4 (M > 4: dot only): 9 for wqkv 6144x4096 (5), 11 for wo 4096x4096 and
    down 4096x12288 (5 each), none for gate_up 24576x4096."""
    if cdiv(n, 16) >= 4 * SMS:
        return ()
    out = []
    for bn, bk, warps, stages, dot in SPLIT_BASES:
        if not dot and m > FMA_MAX_ROWS:
            continue
        for sk in SPLIT_KS:
            if 2 * SMS <= cdiv(n, bn) * sk <= 8 * SMS and k >= sk * bk:
                out.append(GemvConfig(bn, bk, warps, stages, dot, sk))
    return tuple(out)


def candidates(m: int, n: int, k: int) -> tuple[GemvConfig, ...]:
    """Everything `tune` times at (M, N, K): the unsplit dot (and, M <= 4, fma) configs, then
    the split-K ones of the shape."""
    return (DOT_CANDIDATES + (FMA_CANDIDATES if m <= FMA_MAX_ROWS else ())
            + split_candidates(m, n, k))


def config_for(m: int, n: int, k: int, w: torch.Tensor,
               tuning: GemvTuning = DEFAULT_TUNING) -> GemvConfig | None:
    """The cached config of the key (None: use cuBLAS); tunes it on CUDA when `tuning`
    allows, else the default."""
    key = key_of(m, n, k, w, tuning)
    if key in CONFIGS:
        return CONFIGS[key]
    if w.device.type != "cuda" or not tuning.tune or m * n * k == 0:  # empty: nothing to time
        return default_config(m, n, k)
    if torch.cuda.is_current_stream_capturing():
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"gemv {key} first met inside CUDA-graph capture: default config "
                          f"{default_config(m, n, k)} (call kernels.gemv.tune.warm_up first)",
                          stacklevel=3)
        return default_config(m, n, k)
    cfg = tune(torch.randn(m, k, device=w.device, dtype=w.dtype), w, tuning=tuning)
    times = TUNE_LOG[key]
    if tuning.cublas_fallback and not times[str(cfg)] <= times["cublas"]:
        cfg = None
    CONFIGS[key] = cfg
    return cfg


def tune(x: torch.Tensor, w: torch.Tensor, *, rep_ms: int = 20,
         tuning: GemvTuning = DEFAULT_TUNING) -> GemvConfig:
    """Time every candidate and cuBLAS on x (M, K) and w (N, K) (in CUDA graphs if
    tuning.graph) into TUNE_LOG; return the fastest candidate (CUDA only)."""
    m, n, k = x.shape[0], w.shape[0], w.shape[1]
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    graph = tuning.graph
    ws = l2_copies(w) if graph else [w]  # made once, shared by every timing
    want = x.float() @ w.float().t()
    times: dict[str, float] = {}
    best, best_us = default_config(m, n, k), float("inf")
    for cfg in candidates(m, n, k):
        try:
            launch(x, w, cfg, y)
            err = float((y.float() - want).abs().max())
            if not err <= 1e-2 * float(want.abs().max()) + 1e-2:  # a miscompile is no winner
                times[str(cfg)] = float("nan")
                continue
            us = _time(lambda v, c=cfg: launch(x, v, c, y), ws, rep_ms, graph)
        except Exception as err:  # noqa: BLE001 - out of shared memory, compile error
            times[str(cfg)] = float("nan")
            warnings.warn(f"gemv config {cfg} failed on ({m}, {n}, {k}): {err}", stacklevel=2)
            continue
        times[str(cfg)] = us
        if us < best_us:
            best, best_us = cfg, us
    times["cublas"] = _time(lambda v: torch.matmul(x, v.t()), ws, rep_ms, graph)
    TUNE_LOG[key_of(m, n, k, w, tuning)] = times
    return best


def _time(fn, ws: list[torch.Tensor], rep_ms: int, graph: bool) -> float:
    """Median microseconds of fn(w): `streamed` over ws (graph), else do_bench on ws[0]."""
    import triton.testing

    if graph:
        try:
            return streamed(fn, ws).p50
        except Exception as err:  # noqa: BLE001 - a capture failure: time it the other way
            warnings.warn(f"gemv tuning in a CUDA graph failed ({err}); do_bench instead",
                          stacklevel=2)
    return 1e3 * triton.testing.do_bench(lambda: fn(ws[0]), warmup=5, rep=rep_ms,
                                         return_mode="median")


def l2_copies(w: torch.Tensor, most: int = 24) -> list[torch.Tensor]:
    """w and clones of it, at least 3x L2 and two tensors in all but never more than `most`
    (`streamed`'s calls: a graph of 24 calls reads 24 copies at most; a small W, whose
    copies could not fill 3x L2 anyway, stays cheap): cycled through, every call streams
    its W from HBM where W is large."""
    copies = min(most, max(2, cdiv(3 * L2_BYTES, max(w.nbytes, 1))))
    return [w] + [w.clone() for _ in range(copies - 1)]


def streamed(fn, ws: list[torch.Tensor], calls: int = 24):
    """`kernels.timing.Timing` (us) per call of fn(v), v cycling through `ws` (`l2_copies`)
    over `calls` calls captured in one CUDA graph, as a decode step's graph runs them."""
    from kernels.timing import graph_us

    it = itertools.cycle(ws)
    return graph_us(lambda: fn(next(it)), calls=calls)


def warm_up(weights: Iterable[torch.Tensor], rows: Iterable[int] = (1,),
            tuning: GemvTuning = DEFAULT_TUNING) -> None:
    """Tune every distinct (N, K) of `weights` for each M in `rows` (outside capture)."""
    seen = set()
    for w in weights:
        for m in rows:
            key = key_of(m, w.shape[0], w.shape[1], w, tuning)
            if key not in seen:
                seen.add(key)
                config_for(m, w.shape[0], w.shape[1], w, tuning)
