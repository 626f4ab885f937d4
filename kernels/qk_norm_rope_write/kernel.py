"""Triton `qk_norm_rope_write`: q/k RMSNorm + RoPE and the K/V pool write in one launch.

Replaces the ~5 elementwise kernels Inductor emits for this part of a Qwen3 layer (q norm,
k norm, RoPE q, RoPE k, V index_copy). One program per (token t, tile of BLOCK_H heads); the
heads of a token are the nh + 2*nkv D-wide column blocks of its qkv row (q heads, k heads,
v heads), so a tile may mix kinds. For a q or k head row x (D values, fp32):

    xn = x * rsqrt(mean(x^2) + eps) * w            (w = q_norm or k_norm weight)
    out[i]       = xn[i] cos_i - xn[i + D/2] sin_i      (i < D/2)
    out[i + D/2] = xn[i + D/2] cos_i + xn[i] sin_i

with cos_i = cos_sin[t, i], sin_i = cos_sin[t, D/2 + i]; q heads go to the returned q
(T, nh, D), k heads to k_pool[cache_loc[t]], v heads are copied to v_pool[cache_loc[t]].
Math in fp32, one rounding to the output dtype (the oracle, like decoder_layer, rounds after
the norm, after the weight multiply and after RoPE). Slots outside [0, S) are not written.
Semantics: kernels/qk_norm_rope_write/ref.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._checks import FLOAT_DTYPES, INT_DTYPES, check_int, check_len, check_runnable
from kernels._checks import check_tensor as _check
from kernels.pdl import launch_options, pdl_enter, use_pdl


@triton.jit(do_not_specialize=["num_slots", "nh", "nkv"])
def _qk_norm_rope_write_kernel(
    qkv_ptr, qw_ptr, kw_ptr, cs_ptr, loc_ptr, q_ptr, k_pool_ptr, v_pool_ptr,
    num_slots, nh, nkv, eps,
    s_qkv, s_cs, s_loc, s_q_t, s_q_h, s_kp_s, s_kp_h, s_vp_s, s_vp_h,
    D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    r = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)  # head index in the qkv row
    is_q = r < nh
    is_k = (r >= nh) & (r < nh + nkv)
    is_v = (r >= nh + nkv) & (r < nh + 2 * nkv)
    half = D // 2  # constexpr
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    low = d < half
    partner = tl.where(low, d + half, d - half)
    pair = tl.where(low, d, d - half)
    sign = tl.where(low, -1.0, 1.0)

    loc = tl.load(loc_ptr + t * s_loc + tl.zeros([BLOCK_H], tl.int64)).to(tl.int64)  # bcast
    slot_ok = (loc >= 0) & (loc < num_slots)
    m = (is_q | is_k | is_v)[:, None] & d_ok[None, :]
    row = qkv_ptr + t * s_qkv + r.to(tl.int64) * D  # (BLOCK_H,)
    x = tl.load(row[:, None] + d[None, :], mask=m, other=0.0).to(tl.float32)
    x_pair = tl.load(row[:, None] + partner[None, :], mask=m, other=0.0).to(tl.float32)
    wq = tl.load(qw_ptr + d, mask=d_ok, other=0.0).to(tl.float32)
    wq_pair = tl.load(qw_ptr + partner, mask=d_ok, other=0.0).to(tl.float32)
    wk = tl.load(kw_ptr + d, mask=d_ok, other=0.0).to(tl.float32)
    wk_pair = tl.load(kw_ptr + partner, mask=d_ok, other=0.0).to(tl.float32)
    w = tl.where(is_q[:, None], wq[None, :], wk[None, :])
    w_pair = tl.where(is_q[:, None], wq_pair[None, :], wk_pair[None, :])
    cos = tl.load(cs_ptr + t * s_cs + pair, mask=d_ok, other=1.0)
    sin = tl.load(cs_ptr + t * s_cs + half + pair, mask=d_ok, other=0.0)

    inv = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)[:, None]
    rot = x * inv * w * cos[None, :] + sign[None, :] * (x_pair * inv * w_pair) * sin[None, :]
    out = tl.where(is_v[:, None], x, rot)

    rq = r.to(tl.int64)
    q_dst = q_ptr + t * s_q_t + rq[:, None] * s_q_h + d[None, :]
    tl.store(q_dst, out.to(q_ptr.dtype.element_ty), mask=m & is_q[:, None])
    k_dst = k_pool_ptr + (loc * s_kp_s + (rq - nh) * s_kp_h)[:, None] + d[None, :]
    tl.store(k_dst, out.to(k_pool_ptr.dtype.element_ty), mask=m & (is_k & slot_ok)[:, None])
    v_dst = v_pool_ptr + (loc * s_vp_s + (rq - nh - nkv) * s_vp_h)[:, None] + d[None, :]
    tl.store(v_dst, out.to(v_pool_ptr.dtype.element_ty), mask=m & (is_v & slot_ok)[:, None])


def _check_args(qkv, q_norm_weight, k_norm_weight, cos_sin, cache_loc, k_pool, v_pool,
                num_heads, eps) -> None:
    _check("qkv", qkv, ndim=2, dtypes=FLOAT_DTYPES, inner_stride_one=True)
    dev = qkv.device
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        _check(name, pool, ndim=3, dtypes=FLOAT_DTYPES, device=dev, inner_stride_one=True)
    if v_pool.shape != k_pool.shape or v_pool.dtype != k_pool.dtype:
        raise ValueError(f"v_pool {tuple(v_pool.shape)} {v_pool.dtype} must match k_pool "
                         f"{tuple(k_pool.shape)} {k_pool.dtype}")
    check_int("num_heads", num_heads, minimum=1)
    nkv, d = k_pool.shape[1], k_pool.shape[2]
    if d % 2 or qkv.shape[1] != (num_heads + 2 * nkv) * d:
        raise ValueError(f"qkv has {qkv.shape[1]} columns, expected (nh + 2*nkv) * D = "
                         f"{(num_heads + 2 * nkv) * d} from num_heads and the pools (D even)")
    for name, wt in (("q_norm_weight", q_norm_weight), ("k_norm_weight", k_norm_weight)):
        _check(name, wt, ndim=1, dtypes=FLOAT_DTYPES, device=dev, inner_stride_one=True)
        check_len(name, wt, d, "head dim D of the pools")
    _check("cos_sin", cos_sin, ndim=2, dtypes=(torch.float32,), device=dev,
           inner_stride_one=True)
    if tuple(cos_sin.shape) != (qkv.shape[0], d):
        raise ValueError(f"cos_sin has shape {tuple(cos_sin.shape)}, expected (T, D) = "
                         f"{(qkv.shape[0], d)}")
    _check("cache_loc", cache_loc, ndim=1, dtypes=INT_DTYPES, device=dev)
    check_len("cache_loc", cache_loc, qkv.shape[0], "T tokens of qkv")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps must be a non-negative float, got {eps!r}")
    check_runnable("qkv", qkv)


def qk_norm_rope_write(
    qkv: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    cos_sin: torch.Tensor,
    cache_loc: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    *,
    num_heads: int,
    eps: float,
    block_heads: int = 8,
    num_warps: int = 4,
    pdl: bool = False,
) -> torch.Tensor:
    """Triton version of `qk_norm_rope_write_ref` (same arguments, same result).

    Args:
        qkv: (T, nh*D + 2*nkv*D) fp32/fp16/bf16, last dim contiguous.
        q_norm_weight, k_norm_weight: (D,); cos_sin: (T, D) fp32; cache_loc: (T,) int.
        k_pool, v_pool: (S, nkv, D), same shape and dtype, last dim contiguous; written.
        block_heads: heads (q, k or v) per program, a power of two; num_warps: per program.
        pdl: a programmatic dependent launch (kernels/pdl.py).

    Returns: q (T, nh, D) in qkv's dtype, contiguous.
    """
    _check_args(qkv, q_norm_weight, k_norm_weight, cos_sin, cache_loc, k_pool, v_pool,
                num_heads, eps)
    tokens = qkv.shape[0]
    nkv, d = k_pool.shape[1], k_pool.shape[2]
    q = torch.empty(tokens, num_heads, d, device=qkv.device, dtype=qkv.dtype)
    if tokens == 0:
        return q
    heads = num_heads + 2 * nkv
    pdl = use_pdl(pdl, qkv)
    _qk_norm_rope_write_kernel[(tokens, triton.cdiv(heads, block_heads))](
        qkv, q_norm_weight, k_norm_weight, cos_sin, cache_loc, q, k_pool, v_pool,
        k_pool.shape[0], num_heads, nkv, float(eps),
        qkv.stride(0), cos_sin.stride(0), cache_loc.stride(0), q.stride(0), q.stride(1),
        k_pool.stride(0), k_pool.stride(1), v_pool.stride(0), v_pool.stride(1),
        D=d, BLOCK_H=block_heads, BLOCK_D=triton.next_power_of_2(d), PDL=pdl,
        num_warps=num_warps, **launch_options(pdl),
    )
    return q
