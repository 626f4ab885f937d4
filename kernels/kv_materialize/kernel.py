"""Triton `kv_materialize`: DFlash KV injection into every draft layer's pool.

Two steps (docs/sglang.md sections 2.1 and 4.3):

1. one GEMM for all layers: kv = ctx_hidden @ w_kv.view(L*O, H)^T, (T, L*O) fp32 with
   O = 2*nkv*D, read as kv_all (L, T, O) through strides (no copy);
2. one Triton launch over (row blocks, layers), a row being one (token, kv head):

       k  = kv_all[l, t, h*D : (h+1)*D] in fp32
       kn = k * rsqrt(mean(k^2) + eps) * k_norm_weight[l]
       out[i]        = kn[i] cos_i - kn[i + R/2] sin_i         (i < R/2)
       out[i + R/2]  = kn[i + R/2] cos_i + kn[i] sin_i
       out[i]        = kn[i]                                   (i >= R)
       k_pool[l, cache_loc[t], h] = out;  v_pool[l, cache_loc[t], h] = kv_all[l, t, (nkv+h)*D ...]

   cos_i = cos_sin_cache[positions[t], i], sin_i = cos_sin_cache[positions[t], R/2 + i]. With
   commit_lens, token t = b*B + j is written only if j < commit_lens[b].

Unlike SGLang (one norm+RoPE launch per layer, then a separate pool write per layer), the
layers and the pool write share one launch. The GEMM keeps its fp32 accumulator as output, so
K and V are rounded once, to the pool dtype (the contract's "math in fp32, one rounding");
SGLang rounds the projection to the model dtype first.
Rows whose position is outside [0, P) or whose slot is outside [0, S) are not written: the
oracle would raise on them, and the kernel cannot without a device-to-host sync.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._checks import FLOAT_DTYPES, INT_DTYPES, check_int, check_len, check_runnable
from kernels._checks import check_tensor as _check

# torch.mm(..., out_dtype=torch.float32) for fp16/bf16 inputs on CUDA exists since torch 2.8.
_MM_OUT_DTYPE = torch.__version__ >= (2, 8)


@triton.jit(do_not_specialize=["num_rows", "num_pos", "num_slots", "nkv", "half", "B"])
def _kv_norm_rope_write_kernel(
    kv_ptr, weight_ptr, cos_sin_ptr, positions_ptr, cache_loc_ptr, commit_ptr,
    k_pool_ptr, v_pool_ptr,
    num_rows, num_pos, num_slots, eps,
    stride_kv_l, stride_kv_t, stride_w_l, stride_cs, stride_pos, stride_loc, stride_commit,
    stride_kp_l, stride_kp_s, stride_kp_h, stride_vp_l, stride_vp_s, stride_vp_h,
    nkv, D, half, B,
    HAS_COMMIT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):
    layer = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < num_rows
    t = (rows // nkv).to(tl.int64)
    h = rows % nkv
    if HAS_COMMIT:
        commit = tl.load(commit_ptr + (t // B) * stride_commit, mask=row_ok, other=0)
        row_ok = row_ok & ((t % B) < commit)
    pos = tl.load(positions_ptr + t * stride_pos, mask=row_ok, other=0).to(tl.int64)
    loc = tl.load(cache_loc_ptr + t * stride_loc, mask=row_ok, other=0).to(tl.int64)
    row_ok = row_ok & (pos >= 0) & (pos < num_pos) & (loc >= 0) & (loc < num_slots)

    d = tl.arange(0, BLOCK_D)
    rot = d < 2 * half
    low = d < half
    partner = tl.where(low, d + half, d - half)
    pair = tl.where(low, d, d - half)
    sign = tl.where(low, -1.0, 1.0)
    m = row_ok[:, None] & (d < D)[None, :]
    m_rot = m & rot[None, :]

    k_row = kv_ptr + layer * stride_kv_l + t * stride_kv_t + h * D  # (BLOCK_R,)
    k = tl.load(k_row[:, None] + d[None, :], mask=m, other=0.0).to(tl.float32)
    k_pair = tl.load(k_row[:, None] + partner[None, :], mask=m_rot, other=0.0).to(tl.float32)
    w_row = weight_ptr + layer * stride_w_l
    w = tl.load(w_row + d, mask=d < D, other=0.0).to(tl.float32)
    w_pair = tl.load(w_row + partner, mask=rot, other=0.0).to(tl.float32)
    cs_row = cos_sin_ptr + pos * stride_cs  # (BLOCK_R,)
    cos = tl.load(cs_row[:, None] + pair[None, :], mask=m_rot, other=1.0)
    sin = tl.load(cs_row[:, None] + half + pair[None, :], mask=m_rot, other=0.0)

    inv = tl.rsqrt(tl.sum(k * k, axis=1) / D + eps)[:, None]
    kn = k * inv * w[None, :]
    kn_pair = k_pair * inv * w_pair[None, :]
    out = tl.where(rot[None, :], kn * cos + sign[None, :] * kn_pair * sin, kn)
    v = tl.load(k_row[:, None] + nkv * D + d[None, :], mask=m, other=0.0)

    kp_row = k_pool_ptr + layer * stride_kp_l + loc * stride_kp_s + h * stride_kp_h
    vp_row = v_pool_ptr + layer * stride_vp_l + loc * stride_vp_s + h * stride_vp_h
    tl.store(kp_row[:, None] + d[None, :], out.to(k_pool_ptr.dtype.element_ty), mask=m)
    tl.store(vp_row[:, None] + d[None, :], v.to(v_pool_ptr.dtype.element_ty), mask=m)


def _check_pools(k_pool: torch.Tensor, v_pool: torch.Tensor, dev: torch.device) -> None:
    _check("k_pool", k_pool, ndim=4, dtypes=FLOAT_DTYPES, device=dev, inner_stride_one=True)
    _check("v_pool", v_pool, ndim=4, dtypes=FLOAT_DTYPES, device=dev, inner_stride_one=True)
    if v_pool.shape != k_pool.shape or v_pool.dtype != k_pool.dtype:
        raise ValueError(
            f"v_pool {tuple(v_pool.shape)} {v_pool.dtype} must match k_pool "
            f"{tuple(k_pool.shape)} {k_pool.dtype}"
        )


def _check_rope(k_norm_weight, cos_sin_cache, layers: int, head_dim: int, dev) -> None:
    _check("k_norm_weight", k_norm_weight, ndim=2, dtypes=FLOAT_DTYPES, device=dev,
           inner_stride_one=True)
    if tuple(k_norm_weight.shape) != (layers, head_dim):
        raise ValueError(
            f"k_norm_weight has shape {tuple(k_norm_weight.shape)}, expected (L, D) = "
            f"{(layers, head_dim)} from the pools"
        )
    _check("cos_sin_cache", cos_sin_cache, ndim=2, dtypes=(torch.float32,), device=dev,
           inner_stride_one=True)
    rotary = cos_sin_cache.shape[1]
    if rotary % 2 or rotary > head_dim:
        raise ValueError(
            f"cos_sin_cache has R={rotary} columns; the rotary dim R must be even and <= "
            f"head_dim D={head_dim}"
        )


def _check_tokens(positions, cache_loc, commit_lens, block_size, tokens: int, dev) -> None:
    for name, t in (("positions", positions), ("cache_loc", cache_loc)):
        _check(name, t, ndim=1, dtypes=INT_DTYPES, device=dev)
        check_len(name, t, tokens, "T tokens of the context")
    if block_size is not None:
        check_int("block_size", block_size, minimum=1)
    if commit_lens is None:
        return
    if block_size is None:
        raise ValueError("block_size is required when commit_lens is given")
    _check("commit_lens", commit_lens, ndim=1, dtypes=INT_DTYPES, device=dev)
    if commit_lens.shape[0] * block_size != tokens:
        raise ValueError(
            f"commit_lens has {commit_lens.shape[0]} entries, but T={tokens} tokens need "
            f"T / block_size = {tokens / block_size:g} (T must be bs * block_size)"
        )


def norm_rope_write(
    kv_all: torch.Tensor,
    k_norm_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    cache_loc: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    *,
    eps: float,
    commit_lens: torch.Tensor | None = None,
    block_size: int | None = None,
    block_rows: int | None = None,
    num_warps: int = 2,
) -> None:
    """Step 2 alone, from precomputed projections (the part that moves the bytes).

    Args:
        kv_all: (L, T, 2*nkv*D) projections, per layer the K heads then the V heads; last
            dim contiguous, any strides otherwise.
        block_rows: rows (token, head) per program; default 512 // next_pow2(D) (4 for
            D=128: the best of a sweep on the H200, see the hot-path kernel run in
            benchmarks/README.md).
        num_warps: warps per program.
        The others: as `kv_materialize`.
    """
    dev = kv_all.device
    _check_pools(k_pool, v_pool, dev)
    layers, _, nkv, head_dim = k_pool.shape
    _check("kv_all", kv_all, ndim=3, dtypes=FLOAT_DTYPES, device=dev, inner_stride_one=True)
    if kv_all.shape[0] != layers or kv_all.shape[2] != 2 * nkv * head_dim:
        raise ValueError(
            f"kv_all has shape {tuple(kv_all.shape)}, expected (L, T, 2*nkv*D) with "
            f"L={layers}, 2*nkv*D={2 * nkv * head_dim} from the pools"
        )
    tokens = kv_all.shape[1]
    _check_rope(k_norm_weight, cos_sin_cache, layers, head_dim, dev)
    _check_tokens(positions, cache_loc, commit_lens, block_size, tokens, dev)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps must be a non-negative float, got {eps!r}")
    check_runnable("k_pool", k_pool)
    rows = tokens * nkv
    if rows == 0 or layers == 0:
        return
    block_d = triton.next_power_of_2(head_dim)
    block_r = block_rows or max(1, 512 // block_d)
    commit = commit_lens if commit_lens is not None else positions
    _kv_norm_rope_write_kernel[(triton.cdiv(rows, block_r), layers)](
        kv_all, k_norm_weight, cos_sin_cache, positions, cache_loc, commit, k_pool, v_pool,
        rows, cos_sin_cache.shape[0], k_pool.shape[1], float(eps),
        kv_all.stride(0), kv_all.stride(1), k_norm_weight.stride(0), cos_sin_cache.stride(0),
        positions.stride(0), cache_loc.stride(0), commit.stride(0),
        k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
        v_pool.stride(0), v_pool.stride(1), v_pool.stride(2),
        nkv, head_dim, cos_sin_cache.shape[1] // 2, block_size or 1,
        HAS_COMMIT=commit_lens is not None, BLOCK_R=block_r, BLOCK_D=block_d,
        num_warps=num_warps,
    )


def project_kv(ctx_hidden: torch.Tensor, w_kv: torch.Tensor) -> torch.Tensor:
    """Step 1: all layers' K/V projections in one GEMM, in fp32.

    ctx_hidden (T, H) and w_kv (L, O, H) contiguous, same dtype; returns (L, T, O) fp32, a
    strided view of the (T, L*O) product. 16-bit inputs keep their fp32 accumulator (cuBLAS
    with an fp32 output; elsewhere an exact upcast), so that K and V are rounded only once,
    to the pool dtype.
    """
    layers, width, hidden = w_kv.shape
    weight = w_kv.view(layers * width, hidden).t()
    if ctx_hidden.dtype == torch.float32:
        kv = torch.mm(ctx_hidden, weight)
    elif ctx_hidden.is_cuda and _MM_OUT_DTYPE:
        kv = torch.mm(ctx_hidden, weight, out_dtype=torch.float32)
    else:
        kv = torch.mm(ctx_hidden.float(), weight.float())
    return kv.view(ctx_hidden.shape[0], layers, width).transpose(0, 1)


def kv_materialize(
    ctx_hidden: torch.Tensor,
    w_kv: torch.Tensor,
    k_norm_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    cache_loc: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    *,
    eps: float,
    commit_lens: torch.Tensor | None = None,
    block_size: int | None = None,
) -> None:
    """Write injected K/V of `T` context tokens into every layer's pool, in place.

    Args:
        ctx_hidden: (T, H) fp32/fp16/bf16, hidden_norm(fc(target features)).
        w_kv: (L, 2*nkv*D, H) contiguous, ctx_hidden's dtype; per layer the K rows then the V
            rows of qkv_proj.
        k_norm_weight: (L, D), per-head RMSNorm weight of K.
        cos_sin_cache: (P, R) fp32, R even and <= D; cos in [:, :R/2], sin in [:, R/2:].
        positions: (T,) int absolute positions in [0, P); cache_loc: (T,) int slots in [0, S).
        k_pool, v_pool: (L, S, nkv, D) same shape and dtype, last dim contiguous; written in
            place.
        eps: RMSNorm epsilon.
        commit_lens: optional (bs,) int; then T = bs*B and token b*B + j is written only if
            j < commit_lens[b].
        block_size: B >= 1, required with commit_lens.
    """
    _check("ctx_hidden", ctx_hidden, ndim=2, dtypes=FLOAT_DTYPES, inner_stride_one=True)
    dev = ctx_hidden.device
    _check("w_kv", w_kv, ndim=3, dtypes=(ctx_hidden.dtype,), device=dev)
    if not w_kv.is_contiguous():
        raise ValueError(f"w_kv must be contiguous (one GEMM for all layers), strides "
                         f"{w_kv.stride()}")
    if w_kv.shape[2] != ctx_hidden.shape[1]:
        raise ValueError(
            f"w_kv has H={w_kv.shape[2]} input features, ctx_hidden has H={ctx_hidden.shape[1]}"
        )
    _check_pools(k_pool, v_pool, dev)
    layers, _, nkv, head_dim = k_pool.shape
    if w_kv.shape[:2] != (layers, 2 * nkv * head_dim):
        raise ValueError(
            f"w_kv has shape {tuple(w_kv.shape)}, expected (L, 2*nkv*D, H) with "
            f"L={layers}, 2*nkv*D={2 * nkv * head_dim} from the pools"
        )
    check_runnable("ctx_hidden", ctx_hidden)
    # norm_rope_write checks the pools again and the rope and token arguments: once each.
    norm_rope_write(
        project_kv(ctx_hidden, w_kv), k_norm_weight, cos_sin_cache, positions, cache_loc,
        k_pool, v_pool, eps=eps, commit_lens=commit_lens, block_size=block_size,
    )
