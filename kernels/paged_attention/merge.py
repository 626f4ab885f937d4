"""Split-K merge of `paged_attention`: the partials layout, the merge, and the fused-merge
counters.

A split launch writes, per (request b, KV head h, split s, row r = (t, j)), the unnormalised
partial acc_s (D floats) and (m_s, l_s), into buffers laid out (bs, nkv, SPLITS, T*G, ...).
A row that saw no key in its split (m_s = -1e30, the sentinel; l_s = 0) need not write acc_s:
the merge never reads it. The merge:

    out = sum_s exp(m_s - m) acc_s / sum_s exp(m_s - m) l_s,    m = max_s m_s

(a row with no key in any split: m = -1e30, l = 0, out = 0). It runs either as its own launch
(`_merge_kernel`, one program per (b, h, row tile)) or, with `fused_merge`, inside the
attention kernel, in the split program that finishes last: each split program bumps a
per-(b, h, tile) int32 counter with an acq_rel atomic after its partial stores; the one that
reads SPLITS - 1 merges, then puts the counter back to 0 for the next launch (no host reset,
so CUDA-graph safe). The counters live in `counters`, allocated once per (device, size) and
never freed (graphs bake their address in); launches that share them must be stream-ordered.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_enter

_COUNTERS: dict[tuple[torch.device, int], torch.Tensor] = {}


def counters(device: torch.device, n: int) -> torch.Tensor:
    """A zeroed int32 buffer of at least n counters, kept for the process (the fused merge
    leaves it zeroed after every launch). Inside a CUDA-graph capture a missing buffer is
    allocated but not kept: its zero-fill is captured and runs before each replay; outside
    capture (the graph cache's eager warm-up) the buffer is zeroed now and reused by later
    captures."""
    size = max(256, triton.next_power_of_2(n))
    key = (device, size)
    buf = _COUNTERS.get(key)
    if buf is None:
        buf = torch.zeros(size, dtype=torch.int32, device=device)
        if not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            _COUNTERS[key] = buf
    return buf


def merge_blocks(rows: int, block_m: int, block_d: int, splits: int) -> dict[str, int]:
    """Merge tile constexprs: MERGE_M rows at a time (a power of two <= 16 and <= BLOCK_M, so
    a decode's 4 rows of a 16-row tile do not carry 12 masked ones), SPLITS_P2 >= splits, and
    SB splits per load (SB * MERGE_M * BLOCK_D fp32 <= 8192: 64 registers a thread at 4 warps)."""
    merge_m = min(block_m, 16, triton.next_power_of_2(max(rows, 1)))
    splits_p2 = triton.next_power_of_2(splits)
    sb = max(1, min(splits_p2, 8192 // (merge_m * block_d)))
    return dict(MERGE_M=merge_m, SPLITS_P2=splits_p2, SB=sb)


MERGE_ROWS = 4  # rows per program of the two-launch merge (one decode token's G = 4 heads)


def merge_launch(rows: int, block_d: int, splits: int) -> tuple[int, dict[str, int]]:
    """(rows per program, constexprs) of the two-launch merge over `rows` = T*G rows.

    The merge is a read of SPLITS partials per row: at most MERGE_ROWS rows a program, so a
    verify's 64 rows spread over 16 programs per (b, h) instead of one program walking them
    (one SM's bandwidth: ~48 us a layer at T = 16, splits = 4 on an H200)."""
    per = min(MERGE_ROWS, triton.next_power_of_2(max(rows, 1)))
    return per, merge_blocks(rows, per, block_d, splits)


@triton.jit
def _merge_rows(acc_ptr, ml_ptr, out_ptr, b, h, nkv, rows0, n_rows, RG, SPLITS,
                so_b, so_t, so_h, G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
                MERGE_M: tl.constexpr, SPLITS_P2: tl.constexpr, SB: tl.constexpr):
    """Merge rows rows0 .. rows0 + n_rows - 1 of (b, h) over SPLITS partials; store to out.

    Loads bypass L1 (.cg): in the fused merge other SMs wrote the partials in this launch.
    """
    base = (b * nkv + h) * SPLITS * RG
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    s = tl.arange(0, SPLITS_P2)
    c = tl.arange(0, SB)
    for m0 in range(0, n_rows, MERGE_M):
        r = rows0 + m0 + tl.arange(0, MERGE_M)
        row_ok = (r < rows0 + n_rows) & (r < RG)
        part = base + s[:, None] * RG + r[None, :]  # (SPLITS_P2, MERGE_M)
        ok = (s < SPLITS)[:, None] & row_ok[None, :]
        m_s = tl.load(ml_ptr + 2 * part, mask=ok, other=-1.0e30, cache_modifier=".cg")
        l_s = tl.load(ml_ptr + 2 * part + 1, mask=ok, other=0.0, cache_modifier=".cg")
        m = tl.max(m_s, axis=0)
        l_sum = tl.sum(tl.exp(m_s - m[None, :]) * l_s, axis=0)
        acc = tl.zeros([MERGE_M, BLOCK_D], tl.float32)
        for s0 in range(0, SPLITS, SB):  # SB splits' acc rows per load (a loop: no spills)
            pc = base + (s0 + c)[:, None] * RG + r[None, :]  # (SB, MERGE_M)
            okc = (s0 + c < SPLITS)[:, None] & row_ok[None, :]
            mc = tl.load(ml_ptr + 2 * pc, mask=okc, other=-1.0e30, cache_modifier=".cg")
            live = okc & (mc > -1.0e30)  # rows that saw a key in that split wrote acc
            a = tl.load(acc_ptr + pc[:, :, None] * D + d[None, None, :],
                        mask=live[:, :, None] & d_ok[None, None, :], other=0.0,
                        cache_modifier=".cg")
            acc += tl.sum(tl.exp(mc - m[None, :])[:, :, None] * a, axis=0)
        out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
        t = (r // G).to(tl.int64)
        head = h * G + (r % G)
        tl.store(out_ptr + b * so_b + t[:, None] * so_t + head[:, None] * so_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


@triton.jit(do_not_specialize=["T"])
def _merge_kernel(acc_ptr, ml_ptr, out_ptr, T, SPLITS, so_b, so_t, so_h, G: tl.constexpr,
                  D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                  MERGE_M: tl.constexpr, SPLITS_P2: tl.constexpr, SB: tl.constexpr,
                  PDL: tl.constexpr):
    """The two-launch path's merge: one program per (b, h, tile of BLOCK_M rows); the launch
    takes BLOCK_M from `merge_launch`. PDL: as the attention kernel's (kernel.py)."""
    pdl_enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    rows0 = tl.program_id(2) * BLOCK_M
    _merge_rows(acc_ptr, ml_ptr, out_ptr, b, h, tl.num_programs(1), rows0,
                tl.minimum(T * G - rows0, BLOCK_M), T * G, SPLITS, so_b, so_t, so_h,
                G=G, D=D, BLOCK_D=BLOCK_D, MERGE_M=MERGE_M, SPLITS_P2=SPLITS_P2, SB=SB)
