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
second launch merges them, or with `fused_merge` the last split program of each (b, h, tile)
merges them itself (kernels/paged_attention/merge.py). The split count depends on shapes
only (bs, W), never on data; a split whose share of the keys is empty (a short context in a
wide table) skips the loads and the acc store, and writes only its m = -1e30, l = 0 rows.
Two launch switches, off by default (the engine passes them from its EngineOptions):
`unsplit_max_width` (the short-context rule: a table of width W <= it runs unsplit, no merge
launch; W is a shape, so the rule is CUDA-graph safe) and `fused_merge` (merge.py).
The query and key tiles, the early-load loop, the unmasked key steps (`_key_step`: the
whole key tiles every row of a tile sees, run without masks; trees) and the split count
are shape rules in rules.py. Semantics: kernels/paged_attention/ref.py. A row that sees no
key outputs zeros.
"""

from __future__ import annotations

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
from kernels.paged_attention import rules
from kernels.paged_attention import tree as tree_kernel
from kernels.paged_attention.merge import (
    _merge_kernel,
    _merge_rows,
    counters,
    merge_blocks,
    merge_launch,
)
from kernels.pdl import launch_options, pdl_enter, use_pdl


@triton.jit
def _rows(at, mask, CHECKED: tl.constexpr):
    """K or V rows at `at`, zero where `mask` is off when CHECKED; else every address is
    in range and the load takes no predicate."""
    if CHECKED:
        rows = tl.load(at, mask=mask, other=0.0)
    else:
        rows = tl.load(at)
    return rows


@triton.jit
def _key_step(start, hi, q, acc, m_i, l_i, slot_next, k_ptr, v_ptr, table_ptr, tree_ptr, req,
              h, b, t, pos, pos0, row_ok, d, d_ok, T, window, sm_scale, sk_s, sk_h, sv_s, sv_h,
              st_r, stree_b, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, TREE: tl.constexpr,
              BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, EARLY: tl.constexpr,
              MASKED: tl.constexpr, FULL_D: tl.constexpr):
    """One step of the key loop: keys start .. start + BLOCK_N - 1 into the online softmax
    (acc, m_i, l_i); returns them and the next step's slots (EARLY). MASKED: the range,
    causal, window and tree masks; else the caller vouches that every row sees every key
    (whole tiles below `hi`), and the loads and scores skip them (same values, fewer
    instructions; FULL_D: D == BLOCK_D, so the loads take no mask at all)."""
    w = start + tl.arange(0, BLOCK_N)
    w_ok = w < hi
    if EARLY:
        slot = slot_next
    elif MASKED:
        slot = tl.load(table_ptr + req * st_r + w, mask=w_ok, other=0).to(tl.int64)
    else:
        slot = tl.load(table_ptr + req * st_r + w).to(tl.int64)
    if MASKED:
        kv_mask = w_ok[:, None] & d_ok[None, :]
    else:
        kv_mask = d_ok[None, :]
    k_at = k_ptr + slot[:, None] * sk_s + h * sk_h + d[None, :]
    v_at = v_ptr + slot[:, None] * sv_s + h * sv_h + d[None, :]
    k = _rows(k_at, kv_mask, MASKED or not FULL_D)
    if EARLY:
        v = _rows(v_at, kv_mask, MASKED or not FULL_D)
        wn = w + BLOCK_N
        slot_next = tl.load(table_ptr + req * st_r + wn, mask=wn < hi, other=0).to(tl.int64)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
    if MASKED:
        allowed = row_ok[:, None] & w_ok[None, :]
        if CAUSAL:
            allowed = allowed & (w[None, :] <= pos[:, None])
        if WINDOWED:
            allowed = allowed & (pos[:, None] - w[None, :] < window)
        if TREE:  # keys of the tree's nodes: only the query's own path
            j = w[None, :] - pos0
            inside = (j >= 0) & (j < T) & allowed
            bit = tl.load(tree_ptr + b * stree_b + t[:, None] * T + j, mask=inside, other=1)
            allowed = allowed & (bit != 0)
        s = tl.where(allowed, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    if not EARLY:
        v = _rows(v_at, kv_mask, MASKED or not FULL_D)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    return acc, m_new, l_i, slot_next


@triton.jit(do_not_specialize=["T", "R", "W", "window", "sm_scale", "SPLITS"])
def _paged_attention_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, rows_ptr, pos_ptr, kv_lens_ptr, out_ptr, acc_ptr, ml_ptr,
    cnt_ptr, tree_ptr,
    T, R, W, window, sm_scale, SPLITS,
    sq_b, sq_t, sq_h,
    sk_s, sk_h,
    sv_s, sv_h,
    so_b, so_t, so_h,
    st_r, sp_b, stree_b,
    G: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    TREE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, SPLIT: tl.constexpr, FUSED: tl.constexpr,
    MERGE_M: tl.constexpr, SPLITS_P2: tl.constexpr, SB: tl.constexpr, PDL: tl.constexpr,
    EARLY: tl.constexpr, UNMASKED_BODY: tl.constexpr,
):
    pdl_enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2) % SPLITS
    tile = tl.program_id(2) // SPLITS
    r = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # rows (t, j)
    row_ok = r < T * G
    t = (r // G).to(tl.int64)
    head = h * G + (r % G)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D

    pos = tl.load(pos_ptr + b * sp_b + t, mask=row_ok, other=0)
    kv_len = tl.load(kv_lens_ptr + b).to(tl.int64)
    pos0 = tl.load(pos_ptr + b * sp_b)  # a tree's root position (TREE)
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
    live = tl.where(lo < hi, row_ok, False)  # none in an empty split: no q load, no acc store

    q = tl.load(q_ptr + b * sq_b + t[:, None] * sq_t + head[:, None] * sq_h + d[None, :],
                mask=live[:, None] & d_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    slot_next = tl.zeros([BLOCK_N], tl.int64)
    if EARLY:  # the first step's slots, before the loop
        w0 = lo + tl.arange(0, BLOCK_N)
        slot_next = tl.load(table_ptr + req * st_r + w0, mask=w0 < hi, other=0).to(tl.int64)
    # Keys every row of the tile sees (below each row's own position, before a tree's nodes,
    # inside the range) run unmasked, whole key tiles only; the rest with every mask.
    full = hi
    if CAUSAL:
        full = tl.minimum(full, tl.min(tl.where(row_ok, pos, hi), axis=0) + 1)
    if TREE:
        full = tl.minimum(full, pos0)
    if WINDOWED or not UNMASKED_BODY:
        full = lo
    mid = lo + tl.maximum(full - lo, 0) // BLOCK_N * BLOCK_N
    if UNMASKED_BODY:
        for start in range(lo, mid, BLOCK_N):
            acc, m_i, l_i, slot_next = _key_step(
                start, hi, q, acc, m_i, l_i, slot_next, k_ptr, v_ptr, table_ptr, tree_ptr, req,
                h, b, t, pos, pos0, row_ok, d, d_ok, T, window, sm_scale, sk_s, sk_h, sv_s,
                sv_h, st_r, stree_b, CAUSAL=CAUSAL, WINDOWED=WINDOWED, TREE=TREE,
                BLOCK_N=BLOCK_N, DOT_PRECISION=DOT_PRECISION, EARLY=EARLY, MASKED=False,
                FULL_D=D == BLOCK_D)
    for start in range(mid, hi, BLOCK_N):
        acc, m_i, l_i, slot_next = _key_step(
            start, hi, q, acc, m_i, l_i, slot_next, k_ptr, v_ptr, table_ptr, tree_ptr, req, h,
            b, t, pos, pos0, row_ok, d, d_ok, T, window, sm_scale, sk_s, sk_h, sv_s, sv_h,
            st_r, stree_b, CAUSAL=CAUSAL, WINDOWED=WINDOWED, TREE=TREE, BLOCK_N=BLOCK_N,
            DOT_PRECISION=DOT_PRECISION, EARLY=EARLY, MASKED=True,
            FULL_D=D == BLOCK_D)
    if SPLIT:  # unnormalised partials (bs, nkv, SPLITS, T*G, ...): merge.py
        part = ((b * tl.num_programs(1) + h) * SPLITS + split) * T * G + r
        tl.store(acc_ptr + part[:, None] * D + d[None, :], acc,
                 mask=live[:, None] & d_ok[None, :])
        tl.store(ml_ptr + 2 * part, m_i, mask=row_ok)
        tl.store(ml_ptr + 2 * part + 1, l_i, mask=row_ok)
        if FUSED:  # the last split program of (b, h, tile) merges; release, then acquire
            tl.debug_barrier()  # every thread's partial stores precede the release
            ctr = cnt_ptr + (b * tl.num_programs(1) + h) * (tl.num_programs(2) // SPLITS) + tile
            if tl.atomic_add(ctr, 1, sem="acq_rel", scope="gpu") == SPLITS - 1:
                rows0 = tile * BLOCK_M
                _merge_rows(acc_ptr, ml_ptr, out_ptr, b, h, tl.num_programs(1), rows0,
                            tl.minimum(T * G - rows0, BLOCK_M), T * G, SPLITS,
                            so_b, so_t, so_h, G=G, D=D, BLOCK_D=BLOCK_D, MERGE_M=MERGE_M,
                            SPLITS_P2=SPLITS_P2, SB=SB)
                tl.store(ctr, 0)  # ready for the next launch (all SPLITS have counted)
    else:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out_ptr + b * so_b + t[:, None] * so_t + head[:, None] * so_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


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
    unsplit_max_width: int = 0,
    fused_merge: bool = False,
    tree_mask: torch.Tensor | None = None,
    pdl: bool = False,
    tall_tree: bool = False,
) -> torch.Tensor:
    """Triton version of `paged_attention_ref` (same arguments, same result).

    unsplit_max_width: tables of width W <= this run unsplit (0: the split heuristic always).
    fused_merge: the split programs merge their partials themselves, no second launch.
    tree_mask: (bs, T, T) bool ancestor mask of a tree verify (ref.py), or None.
    pdl: the attention and its merge as programmatic dependent launches (kernels/pdl.py).
    tall_tree: a causal, unwindowed tree verify that fits one tall tile
    (`tree.supports`) runs in kernels/paged_attention/tree.py instead.
    """
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
    check_int("unsplit_max_width", unsplit_max_width, minimum=0)
    tree = None
    if tree_mask is not None:
        check_tensor("tree_mask", tree_mask, ndim=3, dtypes=(torch.bool,), device=dev)
        if tuple(tree_mask.shape) != (bs, t, t):
            raise ValueError(f"tree_mask must have shape {(bs, t, t)}, got "
                             f"{tuple(tree_mask.shape)}")
        tree = tree_mask.contiguous().view(torch.int8)  # same bytes, no conversion kernel
    check_runnable("q", q)

    nkv = k_pool.shape[1]
    group = nh // nkv
    if (tall_tree and tree is not None and causal and window is None
            and tree_kernel.supports(t, group)):
        return tree_kernel.tree_attention(q, k_pool, v_pool, table, req_rows, positions,
                                          kv_lens, tree_mask, sm_scale=sm_scale,
                                          unsplit_max_width=unsplit_max_width)
    out = torch.empty_like(q)
    block_m, warps = rules.query_tile(t * group, tree is not None)
    block_d = max(16, triton.next_power_of_2(d))
    early = rules.uses_early_loads(t * group)
    if bs == 0 or t == 0:
        return out
    tiles = triton.cdiv(t * group, block_m)
    block_n = rules.key_tile(block_d, early, bs * nkv * tiles)
    splits = rules.num_splits(bs * nkv * tiles, table.shape[1], block_n, unsplit_max_width)
    acc = ml = cnt = out  # unused placeholders unless split (cnt: unless fused too)
    fused = splits > 1 and bool(fused_merge)
    no_merge = dict(MERGE_M=1, SPLITS_P2=1, SB=1)  # the merge constexprs when it is not here
    merge = merge_blocks(t * group, block_m, block_d, splits) if splits > 1 else no_merge
    if splits > 1:
        acc = torch.empty(bs, nkv, splits, t * group, d, device=dev, dtype=torch.float32)
        ml = torch.empty(bs, nkv, splits, t * group, 2, device=dev, dtype=torch.float32)
    if fused:
        cnt = counters(dev, bs * nkv * tiles)
    pdl = use_pdl(pdl, q)
    launch_pdl = launch_options(pdl)
    _paged_attention_kernel[(bs, nkv, tiles * splits)](
        q, k_pool, v_pool, table, req_rows, positions, kv_lens, out, acc, ml, cnt,
        tree if tree is not None else positions,
        t, table.shape[0], table.shape[1], window or 1, d**-0.5 if sm_scale is None else sm_scale,
        splits,
        q.stride(0), q.stride(1), q.stride(2),
        k_pool.stride(0), k_pool.stride(1),
        v_pool.stride(0), v_pool.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        table.stride(0), positions.stride(0), tree.stride(0) if tree is not None else 0,
        G=group, D=d, CAUSAL=causal, WINDOWED=window is not None, TREE=tree is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", SPLIT=splits > 1,
        FUSED=fused, **(merge if fused else no_merge), PDL=pdl, EARLY=early,
        UNMASKED_BODY=rules.unmasked_body(tree is not None),
        num_warps=warps, num_stages=rules.loop_stages(), **launch_pdl,
    )
    if splits > 1 and not fused:
        per, merge = merge_launch(t * group, block_d, splits)
        _merge_kernel[(bs, nkv, triton.cdiv(t * group, per))](
            acc, ml, out, t, splits, out.stride(0), out.stride(1), out.stride(2),
            G=group, D=d, BLOCK_M=per, BLOCK_D=block_d, **merge, PDL=pdl, num_warps=4,
            **launch_pdl)
    return out
