"""What both `gemv` kernels share: the launch config, the inner loop and the untuned choice.

The unsplit kernel (launch.py) and the split-K kernel (split_k.py) differ only in which K
range a program walks; both run `accumulate` over it, read the same `GemvConfig` and pad x
to the same `m_pad` rows. Keeping these here lets the two kernels and the tuner (tune.py)
import them without importing each other. `accumulate` has two inner products:

    dot   x tile (M_PAD >= 16, BLOCK_K) times the W tile on tensor cores (mma); the padding
          rows are masked loads, free on a memory-bound kernel.
    fma   M_PAD <= 4: per row of x, sum(W_tile * x_row) on CUDA cores (no padding).

On the CPU (TRITON_INTERPRET=1) the dot path upcasts bf16 tiles to fp32 before tl.dot: the
interpreter's dot mishandles bf16 (numpy has none). Products of bf16 values are exact in fp32,
so this is the math the tensor cores do (bf16 products, fp32 accumulation).
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl


class GemvConfig(NamedTuple):
    """Launch parameters: rows of W per program, K chunk, warps, pipeline stages, dot/fma,
    K slices per N tile (1: the unsplit kernel, launch.py; > 1: split_k.py)."""

    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    dot: bool
    split_k: int = 1

    def __str__(self) -> str:
        """E.g. "fma n16 k512 w4 s3", "dot n32 k512 w4 s3 sk4" (sk only when split)."""
        kind = "dot" if self.dot else "fma"
        sk = f" sk{self.split_k}" if self.split_k != 1 else ""
        return (f"{kind} n{self.block_n} k{self.block_k} w{self.num_warps} "
                f"s{self.num_stages}{sk}")


@triton.jit
def accumulate(
    x_ptr, w_rows, m, m0, M, n_ok, m_ok, k_lo, k_hi, s_xm,
    M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
):
    """The inner loop of both kernels: the (M_PAD, BLOCK_N) fp32 tile of x @ W^T summed over
    K columns [k_lo, k_hi) in BLOCK_K chunks (k_lo a multiple of BLOCK_K; the unsplit kernel
    walks [0, K), a split-K program its slice). w_rows: the tile's BLOCK_N row starts in W;
    m, m_ok: its rows of x (from m0) and which are < M; n_ok: which rows of W are < N. EVEN_K
    and EVEN_N: no chunk runs past k_hi, no row past N (W loads unmasked)."""
    kk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((M_PAD, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=NUM_STAGES):
        k = k0 + kk
        k = tl.max_contiguous(tl.multiple_of(k, BLOCK_K), BLOCK_K)
        k_ok = k < k_hi
        if DOT:
            # W^T tile (BLOCK_K, BLOCK_N), K contiguous: the "TN" operand of tl.dot.
            w_ptrs = w_rows[None, :] + k[:, None]
            if EVEN_K and EVEN_N:
                wt = tl.load(w_ptrs, eviction_policy="evict_first")
            else:
                wt = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0,
                             eviction_policy="evict_first")
            x = tl.load(x_ptr + m[:, None] * s_xm + k[None, :],
                        mask=m_ok[:, None] & k_ok[None, :], other=0.0,
                        eviction_policy="evict_last")
            if IEEE:  # fp32 inputs (no tf32); or bf16 upcast exactly, for the interpreter
                acc += tl.dot(x.to(tl.float32), wt.to(tl.float32), input_precision="ieee")
            else:
                acc += tl.dot(x, wt)
        else:
            w_ptrs = w_rows[:, None] + k[None, :]
            if EVEN_K and EVEN_N:
                w = tl.load(w_ptrs, eviction_policy="evict_first")
            else:
                w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0,
                            eviction_policy="evict_first")
            w = w.to(tl.float32)
            for i in tl.static_range(M_PAD):
                row = tl.minimum(m0 + i, M - 1)  # rows past M: read row M-1, never stored
                xi = tl.load(x_ptr + row * s_xm + k, mask=k_ok, other=0.0,
                             eviction_policy="evict_last").to(tl.float32)
                part = tl.sum(w * xi[None, :], axis=1)  # (BLOCK_N,)
                acc += tl.where(tl.arange(0, M_PAD)[:, None] == i, part[None, :], 0.0)
    return acc


def m_pad(m: int, dot: bool) -> int:
    """Rows of x per program: 16 for tl.dot (its minimum), next power of two (<= 16) else."""
    return 16 if dot else min(16, triton.next_power_of_2(max(m, 1)))


def default_config(m: int, n: int, k: int) -> GemvConfig:
    """The untuned choice (CPU, capture without a tuned entry, tuning off).

    fma at one or two rows (no padded work), tensor-core dot above; BLOCK_N small enough
    that N/BLOCK_N >= 2 programs per SM of an H200 at N >= 4096.
    """
    if m <= 2:
        return GemvConfig(block_n=8, block_k=512, num_warps=4, num_stages=3, dot=False)
    return GemvConfig(block_n=16, block_k=512, num_warps=4, num_stages=4, dot=True)
