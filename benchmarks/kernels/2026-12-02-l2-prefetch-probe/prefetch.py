"""L2 prefetch of a weight that a later GEMV streams: `prefetch_l2` and its launcher.

At batch 1 a decode step streams every weight once, and HBM sits idle while the short
kernels between two projections run (attention, its merge, the norms: ~0.9 ms of a 4.8 ms
Qwen3-8B step on an H200). A prefetch issued just before such a gap pulls the next
projection's weight (o_proj: 33.5 MB; an H200's L2 holds 50 MB) into L2 during it, so the
GEMV then reads L2 instead of HBM. Prefetches are hints: they change no memory, and a line
evicted before use only costs the bandwidth it took.

Two forms, both Hopper PTX (sm_90+), issued by `prefetch_l2` from inside any Triton kernel:
    LINE   one `prefetch.global.L2::evict_last` per 128-byte line
    BULK   one `cp.async.bulk.prefetch.L2.global` per CHUNK bytes (the TMA engine fetches them)
On the CPU (the interpreter) there is no L2 to fill: the launcher returns at once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LINE_BYTES = 128
CHUNK_BYTES = 16384


@triton.jit
def prefetch_l2(base, nbytes, part, parts, BULK: tl.constexpr, BLOCK: tl.constexpr,
                CHUNK: tl.constexpr):
    """Prefetch this caller's share (`part` of `parts`) of the bytes [base, base + nbytes).

    base: the address as an int64 (16-byte aligned); nbytes: a multiple of 16. Returns an
    int32 the caller may ignore (the asm's dummy result, summed so the loop is kept)."""
    step = CHUNK if BULK else 128
    units = tl.cdiv(nbytes, step)
    per = tl.cdiv(units, parts)
    lo = part * per
    hi = tl.minimum(lo + per, units)
    keep = tl.zeros([BLOCK], tl.int32)
    for u0 in range(lo, hi, BLOCK):
        u = u0 + tl.arange(0, BLOCK)
        ok = u < hi
        addr = base + u.to(tl.int64) * step
        addr = tl.where(ok, addr, base)
        if BULK:
            size = tl.minimum(nbytes - u.to(tl.int64) * step, step).to(tl.int32)
            size = tl.where(ok, size, 16)
            keep += tl.inline_asm_elementwise(
                "cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0;", "=r,l,r",
                [addr, size], dtype=tl.int32, is_pure=False, pack=1)
        else:
            keep += tl.inline_asm_elementwise(
                "prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0;", "=r,l",
                [addr], dtype=tl.int32, is_pure=False, pack=1)
    return tl.sum(keep, axis=0)


@triton.jit
def _prefetch_kernel(base, nbytes, sink_ptr, BULK: tl.constexpr, BLOCK: tl.constexpr,
                     CHUNK: tl.constexpr):
    kept = prefetch_l2(base, nbytes, tl.program_id(0), tl.num_programs(0), BULK, BLOCK, CHUNK)
    if kept != 0:  # never: the asm's result is 0; keeps the prefetches live
        tl.store(sink_ptr, kept)


_SINK: dict[torch.device, torch.Tensor] = {}


def prefetch(w: torch.Tensor, *, programs: int = 32, bulk: bool = True) -> None:
    """Ask L2 to fetch all of w (contiguous, CUDA) now; a no-op on the CPU."""
    if not w.is_cuda:
        return
    if not w.is_contiguous() or w.data_ptr() % 16:
        raise ValueError("prefetch needs a contiguous, 16-byte aligned tensor")
    sink = _SINK.get(w.device)
    if sink is None:
        sink = _SINK[w.device] = torch.zeros(1, dtype=torch.int32, device=w.device)
    nbytes = w.nbytes // 16 * 16
    _prefetch_kernel[(programs,)](w.data_ptr(), nbytes, sink, BULK=bulk, BLOCK=128,
                                  CHUNK=CHUNK_BYTES, num_warps=4)
