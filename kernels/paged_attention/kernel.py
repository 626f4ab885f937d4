"""Triton `paged_attention`: flash attention that reads K/V in place from a paged pool.

One program per (request b, KV head h, tile of BLOCK_M query rows). The rows of a tile are
(token t, group member j) pairs of the nh / nkv query heads that share KV head h, so a
decode step (T = 1) and a verify block (T = B) both fill the tensor cores' M dimension, and
each K/V row is loaded once per KV head, never once per query head. The key loop walks the
request's row of `req_to_token`, BLOCK_N positions at a time, gathers K and V from their
slots and keeps an online softmax in fp32 (m, l, acc). Its bounds come from the device:

    lo = max(0, min_t pos_t - window + 1)  (window only),   hi = min(kv_len, max_t pos_t + 1)
                                                                      (max only if causal)

so the same launch serves prefill, verify and decode, and replays inside a CUDA graph.
When the batch is too small to fill the GPU (bs * nkv * tiles programs), the key range is
split across programs (flash-decoding): each writes unnormalised (acc, m, l) partials and a
second launch merges them. The split count depends on shapes only (bs, W), never on data.
Semantics: kernels/paged_attention/ref.py. A row that sees no key outputs zeros.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from kernels._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    check_int,
    check_len,
    check_runnable,
    check_tensor,
)

FORCE_SPLITS: int | None = None  # tests set it to run the split path on tiny shapes
# Short-context rule (opt-in, 0 = off): a launch whose table width W (keys a request may
# hold; the shape, so CUDA-graph safe) is at most this runs unsplit, with no merge launch.
# reference.bench --ablate measures it; WORKBENCH_UNSPLIT_WIDTH sets it from the environment.
UNSPLIT_MAX_WIDTH: int = int(os.environ.get("WORKBENCH_UNSPLIT_WIDTH", "0"))
# Fused merge (opt-in, off): the split programs merge themselves, no second launch
# (kernels/paged_attention/fused_merge.py); WORKBENCH_FUSED_MERGE=1 sets it.
FUSED_MERGE: bool = os.environ.get("WORKBENCH_FUSED_MERGE", "0") == "1"


@triton.jit(do_not_specialize=["T", "R", "W", "window", "sm_scale", "SPLITS"])
def _paged_attention_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, rows_ptr, pos_ptr, kv_lens_ptr, out_ptr, acc_ptr, ml_ptr,
    T, R, W, window, sm_scale, SPLITS,
    sq_b, sq_t, sq_h,
    sk_s, sk_h,
    sv_s, sv_h,
    so_b, so_t, so_h,
    st_r, sp_b,
    G: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, SPLIT: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2) % SPLITS
    r = (tl.program_id(2) // SPLITS) * BLOCK_M + tl.arange(0, BLOCK_M)  # rows (t, j)
    row_ok = r < T * G
    t = (r // G).to(tl.int64)
    head = h * G + (r % G)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D

    q = tl.load(q_ptr + b * sq_b + t[:, None] * sq_t + head[:, None] * sq_h + d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    pos = tl.load(pos_ptr + b * sp_b + t, mask=row_ok, other=0)
    kv_len = tl.load(kv_lens_ptr + b).to(tl.int64)
    req = tl.load(rows_ptr + b).to(tl.int64)

    hi = tl.where((req >= 0) & (req < R), tl.minimum(kv_len, W), 0)  # a bad row sees nothing
    if CAUSAL:
        hi = tl.minimum(hi, tl.max(tl.where(row_ok, pos, -1), axis=0) + 1)
    lo = hi * 0
    if WINDOWED:
        lo = tl.maximum(tl.min(tl.where(row_ok, pos, hi), axis=0) - window + 1, 0)
        lo = (lo // BLOCK_N) * BLOCK_N
    if SPLIT:  # this program's share of the key range, in whole BLOCK_N chunks
        chunk = ((hi - lo + SPLITS - 1) // SPLITS + BLOCK_N - 1) // BLOCK_N * BLOCK_N
        lo = lo + split * chunk
        hi = tl.minimum(hi, lo + chunk)

    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        w = start + tl.arange(0, BLOCK_N)
        w_ok = w < hi
        slot = tl.load(table_ptr + req * st_r + w, mask=w_ok, other=0).to(tl.int64)
        kv_mask = w_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + slot[:, None] * sk_s + h * sk_h + d[None, :], mask=kv_mask,
                    other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
        allowed = row_ok[:, None] & w_ok[None, :]
        if CAUSAL:
            allowed = allowed & (w[None, :] <= pos[:, None])
        if WINDOWED:
            allowed = allowed & (pos[:, None] - w[None, :] < window)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + slot[:, None] * sv_s + h * sv_h + d[None, :], mask=kv_mask,
                    other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    if SPLIT:  # unnormalised partials (bs, nkv, SPLITS, T*G, ...), merged by _merge_kernel
        part = ((b * tl.num_programs(1) + h) * SPLITS + split) * T * G + r
        tl.store(acc_ptr + part[:, None] * D + d[None, :], acc,
                 mask=row_ok[:, None] & d_ok[None, :])
        tl.store(ml_ptr + 2 * part, m_i, mask=row_ok)
        tl.store(ml_ptr + 2 * part + 1, l_i, mask=row_ok)
    else:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out_ptr + b * so_b + t[:, None] * so_t + head[:, None] * so_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


@triton.jit(do_not_specialize=["T"])
def _merge_kernel(acc_ptr, ml_ptr, out_ptr, T, so_b, so_t, so_h, G: tl.constexpr,
                  D: tl.constexpr, SPLITS: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    """out = sum_s exp(m_s - m) acc_s / sum_s exp(m_s - m) l_s, with m = max_s m_s."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    r = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = r < T * G
    d = tl.arange(0, BLOCK_D)
    mask = row_ok[:, None] & (d < D)[None, :]
    base = (b * tl.num_programs(1) + h) * SPLITS * T * G
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)
    for s in range(SPLITS):
        m = tl.maximum(m, tl.load(ml_ptr + 2 * (base + s * T * G + r), mask=row_ok,
                                  other=-1.0e30))
    l_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for s in range(SPLITS):
        part = base + s * T * G + r
        w = tl.exp(tl.load(ml_ptr + 2 * part, mask=row_ok, other=-1.0e30) - m)
        l_sum += w * tl.load(ml_ptr + 2 * part + 1, mask=row_ok, other=0.0)
        acc += w[:, None] * tl.load(acc_ptr + part[:, None] * D + d[None, :], mask=mask,
                                    other=0.0)
    out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
    t = (r // G).to(tl.int64)
    head = h * G + (r % G)
    tl.store(out_ptr + b * so_b + t[:, None] * so_t + head[:, None] * so_h + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask)


def num_splits(programs: int, width: int, block_n: int, unsplit_max_width: int = 0) -> int:
    """Key-range splits so a small batch still fills the GPU: ~2 programs per SM (132 on an
    H200), at least 4 key chunks per split; a power of two, 1 for large batches. A table
    width W <= unsplit_max_width runs unsplit (the short-context rule; 0 turns it off)."""
    if width <= unsplit_max_width:
        return 1
    want = max(1, 264 // max(programs, 1))
    most = max(1, width // (4 * block_n))
    return min(triton.next_power_of_2(want), triton.next_power_of_2(most), 64)


def paged_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    req_to_token: torch.Tensor,
    req_rows: torch.Tensor,
    positions: torch.Tensor,
    kv_lens: torch.Tensor,
    *,
    causal: bool,
    window: int | None = None,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Triton version of `paged_attention_ref` (same arguments, same result)."""
    check_tensor("q", q, ndim=4, dtypes=FLOAT_DTYPES, inner_stride_one=True)
    dev = q.device
    bs, t, nh, d = q.shape
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        check_tensor(name, pool, ndim=3, dtypes=(q.dtype,), device=dev, inner_stride_one=True)
        if pool.shape[2] != d or nh % pool.shape[1] or pool.shape != k_pool.shape:
            raise ValueError(f"{name} has shape {tuple(pool.shape)}: pools must have one "
                             f"shape, head dim {d} and a head count dividing nh={nh}")
    table = check_tensor("req_to_token", req_to_token, ndim=2, dtypes=INT_DTYPES, device=dev,
                         inner_stride_one=True)
    check_tensor("req_rows", req_rows, ndim=1, dtypes=INT_DTYPES, device=dev)
    check_tensor("positions", positions, ndim=2, dtypes=INT_DTYPES, device=dev,
                 inner_stride_one=True)
    check_tensor("kv_lens", kv_lens, ndim=1, dtypes=INT_DTYPES, device=dev)
    check_len("req_rows", req_rows, bs, "q.shape[0]")
    check_len("kv_lens", kv_lens, bs, "q.shape[0]")
    if tuple(positions.shape) != (bs, t):
        raise ValueError(f"positions must have shape {(bs, t)}, got {tuple(positions.shape)}")
    if window is not None:
        check_int("window", window, minimum=1)
    check_runnable("q", q)

    out = torch.empty_like(q)
    nkv = k_pool.shape[1]
    group = nh // nkv
    block_m = min(64, max(16, triton.next_power_of_2(t * group)))
    block_d = max(16, triton.next_power_of_2(d))
    block_n = 64 if block_d <= 64 else 32
    if bs == 0 or t == 0:
        return out
    tiles = triton.cdiv(t * group, block_m)
    splits = FORCE_SPLITS or num_splits(bs * nkv * tiles, table.shape[1], block_n,
                                        UNSPLIT_MAX_WIDTH)
    acc = ml = out  # unused placeholders unless split
    if splits > 1:
        acc = torch.empty(bs, nkv, splits, t * group, d, device=dev, dtype=torch.float32)
        ml = torch.empty(bs, nkv, splits, t * group, 2, device=dev, dtype=torch.float32)
    _paged_attention_kernel[(bs, nkv, tiles * splits)](
        q, k_pool, v_pool, table, req_rows, positions, kv_lens, out, acc, ml,
        t, table.shape[0], table.shape[1], window or 1, d**-0.5 if sm_scale is None else sm_scale,
        splits,
        q.stride(0), q.stride(1), q.stride(2),
        k_pool.stride(0), k_pool.stride(1),
        v_pool.stride(0), v_pool.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        table.stride(0), positions.stride(0),
        G=group, D=d, CAUSAL=causal, WINDOWED=window is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", SPLIT=splits > 1,
        num_warps=4, num_stages=2,
    )
    if splits > 1:
        _merge_kernel[(bs, nkv, tiles)](
            acc, ml, out, t, out.stride(0), out.stride(1), out.stride(2),
            G=group, D=d, SPLITS=splits, BLOCK_M=block_m, BLOCK_D=block_d, num_warps=4)
    return out
