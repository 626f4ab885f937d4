"""Tall-tile tree verify attention: all T nodes of a request's tree in one program per KV head.

`tree_attention` computes what `paged_attention(..., causal=True, tree_mask=mask)` computes
(kernels/paged_attention/ref.py) for a tree of T <= 64 nodes at positions[b, 0] + t, with
T * nh / nkv <= 256 query rows per KV head. One program per (request b, KV head h, key
split) holds every (node t, group member j) row of the tree in one tall tile, so each key of
the shared prefix is gathered once per KV head and split, never once per 16-row tile as in
the tree rule of kernel.py (`rules.TREE_TILE`). The ancestor mask enters as one int64 word
per node (bit j: node j is node t or one of its ancestors), packed by the program from the
bool mask once, before its key loop; the key steps inside the tree shift and test that word
in registers instead of gathering the bool mask per (row, key). Key steps wholly below the
tree's root position run without any mask. Splits and their merge are those of kernel.py
(rules.num_splits, merge.py). The engine takes this path with EngineOptions.tall_tree.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.paged_attention import rules
from kernels.paged_attention.merge import _merge_kernel, merge_launch

MAX_NODES = 64  # one int64 word of ancestor bits per node
MAX_ROWS = 256  # T * G rows of the one tile


def supports(nodes: int, group: int) -> bool:
    """Whether a tree of `nodes` nodes at `group` query heads per KV head fits one tall tile."""
    return 1 <= nodes <= MAX_NODES and nodes * group <= MAX_ROWS


def tall_tile(rows: int) -> tuple[int, int]:
    """(BLOCK_M, num_warps) of the tall tile for `rows` = T * G query rows: the next power
    of two >= 16, a warp per 16 rows (4 to 16 warps), so the fp32 accumulator stays in
    registers."""
    block_m = max(16, triton.next_power_of_2(rows))
    return block_m, min(16, max(4, block_m // 16))


@triton.jit
def _tree_step(start, hi, q, acc, m_i, l_i, word, k_ptr, v_ptr, table_ptr, req, h, pos, pos0,
               row_ok, d, d_ok, T, sm_scale, sk_s, sk_h, sv_s, sv_h, st_r,
               BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, MASKED: tl.constexpr):
    """Keys start .. start + BLOCK_N - 1 into the online softmax (acc, m_i, l_i). MASKED: the
    range, causal and tree masks (bit w - pos0 of each row's ancestor word); else every row
    sees every key (whole steps below the tree's root)."""
    w = start + tl.arange(0, BLOCK_N)
    w_ok = w < hi
    slot = tl.load(table_ptr + req * st_r + w, mask=w_ok, other=0).to(tl.int64)
    kv_mask = w_ok[:, None] & d_ok[None, :]
    k = tl.load(k_ptr + slot[:, None] * sk_s + h * sk_h + d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + slot[:, None] * sv_s + h * sv_h + d[None, :], mask=kv_mask, other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
    if MASKED:
        allowed = row_ok[:, None] & w_ok[None, :] & (w[None, :] <= pos[:, None])
        j = w[None, :] - pos0
        inside = (j >= 0) & (j < T)
        bit = (word[:, None] >> tl.where(inside, j, 0).to(tl.int64)) & 1
        allowed = allowed & (~inside | (bit != 0))
        s = tl.where(allowed, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    return acc, m_new, l_i


@triton.jit(do_not_specialize=["T", "R", "W", "sm_scale", "SPLITS"])
def _tree_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, rows_ptr, pos_ptr, kv_lens_ptr, mask_ptr, out_ptr, acc_ptr,
    ml_ptr, T, R, W, sm_scale, SPLITS,
    sq_b, sq_t, sq_h, sk_s, sk_h, sv_s, sv_h, so_b, so_t, so_h, st_r, sp_b, sm_b,
    G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr, SPLIT: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    r = tl.arange(0, BLOCK_M)  # rows (t, j)
    row_ok = r < T * G
    t = (r // G).to(tl.int64)
    head = h * G + (r % G)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D

    pos = tl.load(pos_ptr + b * sp_b + t, mask=row_ok, other=0)
    pos0 = tl.load(pos_ptr + b * sp_b)
    kv_len = tl.load(kv_lens_ptr + b).to(tl.int64)
    req = tl.load(rows_ptr + b).to(tl.int64)
    hi = tl.where((req >= 0) & (req < R), tl.minimum(kv_len, W), 0)  # a bad row sees nothing
    hi = tl.minimum(hi, tl.max(tl.where(row_ok, pos, -1), axis=0) + 1)
    lo = hi * 0
    if SPLIT:  # this program's share of the key range, in whole BLOCK_N chunks
        chunk = ((hi + SPLITS - 1) // SPLITS + BLOCK_N - 1) // BLOCK_N * BLOCK_N
        lo = split * chunk
        hi = tl.minimum(hi, lo + chunk)
    live = tl.where(lo < hi, row_ok, False)

    # each row's ancestor word: bit c set iff mask[b, t, c] (c < T <= 64; bit 63 wraps the
    # sign, which the shift-and-test reads back the same)
    c = tl.arange(0, 64)
    bits = tl.load(mask_ptr + b * sm_b + t[:, None] * T + c[None, :],
                   mask=row_ok[:, None] & (c[None, :] < T), other=0)
    word = tl.sum((bits != 0).to(tl.int64) << c[None, :].to(tl.int64), axis=1)

    q = tl.load(q_ptr + b * sq_b + t[:, None] * sq_t + head[:, None] * sq_h + d[None, :],
                mask=live[:, None] & d_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    full = tl.minimum(hi, pos0)  # keys before the root: every row sees them
    mid = lo + tl.maximum(full - lo, 0) // BLOCK_N * BLOCK_N
    for start in range(lo, mid, BLOCK_N):
        acc, m_i, l_i = _tree_step(start, hi, q, acc, m_i, l_i, word, k_ptr, v_ptr, table_ptr,
                                   req, h, pos, pos0, row_ok, d, d_ok, T, sm_scale, sk_s, sk_h,
                                   sv_s, sv_h, st_r, BLOCK_N=BLOCK_N,
                                   DOT_PRECISION=DOT_PRECISION, MASKED=False)
    for start in range(mid, hi, BLOCK_N):
        acc, m_i, l_i = _tree_step(start, hi, q, acc, m_i, l_i, word, k_ptr, v_ptr, table_ptr,
                                   req, h, pos, pos0, row_ok, d, d_ok, T, sm_scale, sk_s, sk_h,
                                   sv_s, sv_h, st_r, BLOCK_N=BLOCK_N,
                                   DOT_PRECISION=DOT_PRECISION, MASKED=True)
    if SPLIT:  # unnormalised partials (bs, nkv, SPLITS, T*G, ...): merge.py
        part = ((b * tl.num_programs(1) + h) * SPLITS + split) * T * G + r
        tl.store(acc_ptr + part[:, None] * D + d[None, :], acc,
                 mask=live[:, None] & d_ok[None, :])
        tl.store(ml_ptr + 2 * part, m_i, mask=row_ok)
        tl.store(ml_ptr + 2 * part + 1, l_i, mask=row_ok)
    else:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out_ptr + b * so_b + t[:, None] * so_t + head[:, None] * so_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def tree_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                   req_to_token: torch.Tensor, req_rows: torch.Tensor, positions: torch.Tensor,
                   kv_lens: torch.Tensor, tree_mask: torch.Tensor, *,
                   sm_scale: float | None = None, unsplit_max_width: int = 0,
                   key_tile: int | None = None, warps: int | None = None) -> torch.Tensor:
    """`paged_attention(q, ..., causal=True, tree_mask=tree_mask)` in tall tiles.

    q: (bs, T, nh, D); k_pool, v_pool: (S, nkv, D); req_to_token: (R, W) int; req_rows,
    kv_lens: (bs,) int; positions: (bs, T) i64, positions[b, t] = positions[b, 0] + t;
    tree_mask: (bs, T, T) bool ancestor mask. Needs `supports(T, nh // nkv)`; the caller
    (kernel.py's `paged_attention`) checks the arguments. key_tile, warps: override BLOCK_N
    (32) and the tile's num_warps (`tall_tile`), for benches. Returns (bs, T, nh, D).
    """
    bs, t, nh, d = q.shape
    nkv = k_pool.shape[1]
    group = nh // nkv
    if not supports(t, group):
        raise ValueError(f"tree_attention takes T <= {MAX_NODES} nodes and T * G <= "
                         f"{MAX_ROWS} rows, got T={t}, G={group}")
    out = torch.empty_like(q)
    if bs == 0:
        return out
    block_m, tile_warps = tall_tile(t * group)
    block_d = max(16, triton.next_power_of_2(d))
    block_n = key_tile or rules.KEY_TILE or 32
    table = req_to_token
    splits = rules.num_splits(bs * nkv, table.shape[1], block_n, unsplit_max_width)
    acc = ml = out
    if splits > 1:
        acc = torch.empty(bs, nkv, splits, t * group, d, device=q.device, dtype=torch.float32)
        ml = torch.empty(bs, nkv, splits, t * group, 2, device=q.device, dtype=torch.float32)
    mask = tree_mask.contiguous().view(torch.int8)  # same bytes, no conversion kernel
    _tree_kernel[(bs, nkv, splits)](
        q, k_pool, v_pool, table, req_rows, positions, kv_lens, mask, out, acc, ml,
        t, table.shape[0], table.shape[1], d**-0.5 if sm_scale is None else sm_scale, splits,
        q.stride(0), q.stride(1), q.stride(2), k_pool.stride(0), k_pool.stride(1),
        v_pool.stride(0), v_pool.stride(1), out.stride(0), out.stride(1), out.stride(2),
        table.stride(0), positions.stride(0), mask.stride(0),
        G=group, D=d, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", SPLIT=splits > 1,
        num_warps=warps or tile_warps, num_stages=rules.loop_stages(),
    )
    if splits > 1:
        per, merge = merge_launch(t * group, block_d, splits)
        _merge_kernel[(bs, nkv, triton.cdiv(t * group, per))](
            acc, ml, out, t, splits, out.stride(0), out.stride(1), out.stride(2),
            G=group, D=d, BLOCK_M=per, BLOCK_D=block_d, **merge, PDL=False, num_warps=4)
    return out
