"""The GEMV's SiLU-and-mul prologue: the down projection's input made as the GEMV loads it.

A decode layer launches a small kernel before its down projection only to make the input
u = silu(gate) * up from gate_up = [gate | up]. At batch 1 that costs a launch and a round
trip of the vector through memory (~1.4 us on an H200, `python -m kernels.bench --ops gemv`),
against ~26 us of weight streaming. With the prologue the fma kernel computes u chunk by
chunk where it loads x (fp32 math, one rounding to x's dtype, as Inductor's fused kernel
rounds), and the small kernel disappears:

    x = [gate | up] (M, 2K):  u[m, k] = bf16(silu(gate[m, k]) * up[m, k])

Only the fma inner product (M <= 4 rows a program) takes it: the dot kernels' 16-row tiles,
upcast to fp32 for the op, overflow shared memory or spill; their launcher makes u first.
An input RMSNorm prologue was measured too and lost: every program must read the whole row
for its statistics before its first product, which delays the weight stream by more than
the launch it saves (17.7 against 15.7 us at M = 1 for wqkv, the same run).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_row(x_ptr, row, k, k_ok, s_xm, k_up, SILU: tl.constexpr):
    """Columns k of the GEMV's input row `row` in x's dtype (masked: 0): x itself, or with
    SILU silu(gate) * up, gate at x[row, k] and up at x[row, k_up + k]."""
    offs = row * s_xm + k
    if SILU:
        g = tl.load(x_ptr + offs, mask=k_ok, other=0.0, eviction_policy="evict_last")
        up = tl.load(x_ptr + offs + k_up, mask=k_ok, other=0.0, eviction_policy="evict_last")
        g = g.to(tl.float32)
        return (g * tl.sigmoid(g) * up.to(tl.float32)).to(x_ptr.dtype.element_ty)
    return tl.load(x_ptr + offs, mask=k_ok, other=0.0, eviction_policy="evict_last")
