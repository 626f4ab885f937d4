"""Programmatic dependent launch (PDL, Hopper and later): one kernel starting early.

A kernel launched with PDL may be scheduled before the kernel ahead of it in the stream has
finished: its programs get resident while that kernel drains, so the launch latency and
the tail of one overlap instead of adding. Every program of such a kernel first runs
`pdl_enter`: `gdc_wait` blocks until the kernel before it has completed and flushed its
memory (so nothing is read or written early), then `gdc_launch_dependents` lets the next
PDL launch start. The wait is transitive (the kernel before could only complete after its
own wait), so a chain of PDL launches keeps stream order. A launch without PDL ignores
both; kernels other than ours (cuBLAS, Inductor's) launch as usual.

The switch is `EngineOptions.pdl`; `launch_options` gives the launch keyword for it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TRIGGER_FIRST = False
"""Probe switch: a PDL kernel lets the next one launch before its own wait (deeper run-ahead)."""
PREFETCH_W = False
"""Probe switch: a PDL-launched GEMV asks L2 for its rows of W before it waits."""


@triton.jit
def pdl_enter(PDL: tl.constexpr, TRIGGER_FIRST: tl.constexpr = False):
    """The first statement of a kernel that may be PDL-launched (PDL: it is)."""
    if PDL:
        if TRIGGER_FIRST:
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()
        else:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_rows(w_addr, n, n_ok, s_wn, K, ELT: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    """Ask L2 for rows n (BLOCK_N,) of a row-major W at byte address w_addr (int64), K
    columns of ELT bytes each, one `prefetch.global.L2::evict_last` per 128-byte line."""
    LINE: tl.constexpr = 128 // ELT
    cols = tl.arange(0, BLOCK_K // LINE) * LINE
    row = tl.where(n_ok, n, 0).to(tl.int64) * s_wn
    for k0 in range(0, K, BLOCK_K):
        k = k0 + cols
        off = row[:, None] + tl.where(k < K, k, 0)[None, :]
        addr = w_addr + off * ELT
        tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0;",
                                  "=r,l", [addr], dtype=tl.int32, is_pure=False, pack=1)


def use_pdl(pdl: bool, tensor: torch.Tensor) -> bool:
    """Whether a launch on tensor's device takes PDL: asked for, and a CUDA device of
    compute capability >= 9 (elsewhere, the CPU interpreter included, a plain launch)."""
    return bool(pdl) and tensor.is_cuda and torch.cuda.get_device_capability(tensor.device)[0] >= 9


def launch_options(pdl: bool) -> dict[str, bool]:
    """The launch keywords of a kernel whose PDL constexpr is `pdl` (from `use_pdl`)."""
    return {"launch_pdl": True} if pdl else {}
