"""Split-K `gemv`: SPLIT_K programs share each (M_PAD, BLOCK_N) tile of y, one launch.

For narrow N and long K (Qwen3-8B's o_proj 4096x4096 and down_proj 4096x12288) the unsplit
kernel has only N/BLOCK_N = 256-512 programs for 132 SMs, each walking the whole K serially:
too few bytes in flight. Here grid axis 0 folds (N tile, K slice), the slice fastest, so
SPLIT_K times as many programs stream W. Program (tile, s) covers

    K slice s = [s * K_SPLIT, min((s + 1) * K_SPLIT, K)),
    K_SPLIT = BLOCK_K * cdiv(cdiv(K, SPLIT_K), BLOCK_K)

(a multiple of BLOCK_K, so every chunk start is aligned; the last slices are ragged or empty
when K is not a multiple of SPLIT_K * BLOCK_K: masked loads, an empty slice adds zeros). It
accumulates its slice in fp32 with shared.py's `accumulate` (the dot or fma loop that the
unsplit kernel, launch.py, runs over all of K), stores the partial into the fp32 workspace
(SPLIT_K, M, N), then bumps the tile's int32 counter with an acq_rel atomic (after a
barrier: every thread's partial stores precede the release). The program that reads
SPLIT_K - 1 (the last one of the tile to finish) loads the SPLIT_K partials (.cg: from L2,
where the other SMs' stores are), sums them in the fixed order s = 0, 1, ... (so y is
bitwise deterministic, whichever program came last), stores y in its dtype and puts the
counter back to 0: the next launch, or a CUDA-graph replay, starts clean without a host
reset. No extra launch, no host sync: CUDA-graph capturable.

Workspace and counters are cached per (device, size bucket) (`buffer`): allocated once
(counters zeroed), never freed (captured graphs bake their addresses in) and shared by every
shape of the bucket. That is safe only for stream-ordered launches: two split-K launches in
flight at once on different streams with the same (device, bucket) would mix partials and
counts. The engine runs every gemv on one stream (eager and graph replays alike); a caller
with concurrent streams must not use split_k > 1 configs there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gemv.shared import GemvConfig, accumulate

_BUFFERS: dict[tuple[str, torch.device, int], torch.Tensor] = {}


def buffer(kind: str, device: torch.device, numel: int) -> torch.Tensor:
    """A cached flat buffer of at least `numel` entries: kind "workspace" (fp32 partials) or
    "counters" (int32, zeroed; every split launch leaves them zeroed).

    Sizes are bucketed to powers of two (>= 256). Inside a CUDA-graph capture a missing
    buffer is allocated but not kept: its zero-fill is captured and runs before each replay;
    outside capture (the engine's eager warm-up) it is kept and later captures reuse it.
    """
    size = max(256, triton.next_power_of_2(max(numel, 1)))
    key = (kind, device, size)
    buf = _BUFFERS.get(key)
    if buf is None:
        dtype = torch.int32 if kind == "counters" else torch.float32
        buf = torch.zeros(size, dtype=dtype, device=device)
        if not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            _BUFFERS[key] = buf
    return buf


@triton.jit
def _gemv_split_k_kernel(
    x_ptr, w_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K, K_SPLIT, s_xm, s_wn, s_ym,
    M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, NUM_STAGES: tl.constexpr, DOT: tl.constexpr,
    IEEE: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
):
    """Grid (cdiv(N, BLOCK_N) * SPLIT_K, cdiv(M, M_PAD)); ws (SPLIT_K, M, N) fp32, cnt one
    int32 per (M tile, N tile), zero on entry and on exit."""
    pid = tl.program_id(0)
    split = pid % SPLIT_K
    pid_n = pid // SPLIT_K
    pid_m = tl.program_id(1)
    m0 = pid_m * M_PAD
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m = m0 + tl.arange(0, M_PAD)
    n_ok = n < N
    m_ok = m < M
    k_lo = split * K_SPLIT
    k_hi = tl.minimum(k_lo + K_SPLIT, K)
    w_rows = w_ptr + n.to(tl.int64) * s_wn  # (BLOCK_N,) row starts
    acc = accumulate(x_ptr, w_rows, m, m0, M, n_ok, m_ok, k_lo, k_hi, s_xm, M_PAD, BLOCK_N,
                     BLOCK_K, NUM_STAGES, DOT, IEEE, EVEN_K, EVEN_N)
    mn_ok = m_ok[:, None] & n_ok[None, :]
    tile = m[:, None].to(tl.int64) * N + n[None, :]  # (M_PAD, BLOCK_N) offsets in one slice
    tl.store(ws_ptr + split * M * N + tile, acc, mask=mn_ok)
    tl.debug_barrier()  # every thread's partial stores precede the release
    ctr = cnt_ptr + pid_m * (tl.num_programs(0) // SPLIT_K) + pid_n
    if tl.atomic_add(ctr, 1, sem="acq_rel", scope="gpu") == SPLIT_K - 1:
        total = tl.zeros((M_PAD, BLOCK_N), dtype=tl.float32)
        for s in tl.static_range(SPLIT_K):  # fixed order: deterministic
            total += tl.load(ws_ptr + s * M * N + tile, mask=mn_ok, other=0.0,
                             cache_modifier=".cg")
        tl.store(y_ptr + m[:, None] * s_ym + n[None, :], total.to(y_ptr.dtype.element_ty),
                 mask=mn_ok)
        tl.store(ctr, 0)  # all SPLIT_K programs have counted: ready for the next launch


def k_split(k: int, split_k: int, block_k: int) -> int:
    """K columns per slice: cdiv(K, split_k) rounded up to a multiple of block_k."""
    return triton.cdiv(triton.cdiv(k, split_k), block_k) * block_k


def gemv_split_k(x2: torch.Tensor, w: torch.Tensor, y: torch.Tensor, config: GemvConfig,
                 pad: int, ieee: bool) -> None:
    """Launch the split-K kernel: x2 (M, K) @ w (N, K)^T -> y (M, N), M, N, K >= 1.

    `config` is a GemvConfig with split_k >= 1 (checked by the caller), `pad` the rows of x per
    program (shared.m_pad), `ieee` the fp32-dot switch of launch.py.
    """
    m, k = x2.shape
    n = w.shape[0]
    sk = config.split_k
    if sk * m * n >= 2**31:
        raise ValueError(f"config.split_k * M * N = {sk} * {m} * {n} partials exceed the "
                         "int32 workspace offsets: use a smaller split_k")
    slice_k = k_split(k, sk, config.block_k)
    n_tiles, m_tiles = triton.cdiv(n, config.block_n), triton.cdiv(m, pad)
    ws = buffer("workspace", x2.device, sk * m * n)
    cnt = buffer("counters", x2.device, n_tiles * m_tiles)
    _gemv_split_k_kernel[(n_tiles * sk, m_tiles)](
        x2, w, y, ws, cnt, m, n, k, slice_k, x2.stride(0), w.stride(0), y.stride(0),
        M_PAD=pad, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SPLIT_K=sk,
        NUM_STAGES=config.num_stages, DOT=config.dot, IEEE=ieee,
        EVEN_K=k == sk * slice_k, EVEN_N=n % config.block_n == 0,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
