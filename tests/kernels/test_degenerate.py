"""Degenerate inputs for every kernel and its oracle, with expectations from elsewhere.

- all-zero rows: an RMSNorm of zeros is zeros (eps keeps it finite), so K, q and k come out
  exactly 0, never NaN; a zero activation row of a GEMV is a zero row;
- huge values: RMSNorm is scale invariant, so rows scaled by 1e15 (fp32) or 300 (fp16, whose
  squares overflow 16 bits) normalize as an fp64 implementation written here (plain loops
  over the rotary pairs) says; attention scores of 1e4 pick the one best key;
- single elements: one token, one head, one layer, one key, B = 1;
- inputs are never modified and outputs never alias an input.

Tiny shapes: the CPU runs TRITON_INTERPRET=1.
"""

from __future__ import annotations

import pytest
import torch

from kernels import (
    accept_bonus,
    accept_bonus_ref,
    gemv,
    kv_materialize,
    kv_materialize_ref,
    paged_attention,
    paged_attention_ref,
    prepare_block,
    prepare_block_ref,
    qk_norm_rope_write,
    qk_norm_rope_write_ref,
)
from kernels.gemv.tuning import GemvTuning

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-6
UNTUNED = GemvTuning(tune=False)  # degenerate values, not the tuner: no candidate compiles


def _norm_rope_fp64(
    x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """x (T, heads, D) -> rope(x / rms(x) * weight) in fp64, pair by pair; cos, sin (T, R/2)."""
    x, weight = x.double(), weight.double()
    normed = x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * weight
    out = normed.clone()
    half = cos.shape[1]
    for i in range(half):
        c, s = cos[:, i, None].double(), sin[:, i, None].double()
        a, b = normed[..., i], normed[..., i + half]
        out[..., i], out[..., i + half] = a * c - b * s, b * c + a * s
    return out


def _kv_args(ctx: torch.Tensor, dtype: torch.dtype, seed: int = 0):
    """One layer, nkv = 2, D = 16 (R = 8), H = ctx's width, slots 1..T of a pool of T + 2."""
    g = torch.Generator().manual_seed(seed)
    t, h = ctx.shape
    w_kv = torch.randn(1, 2 * 2 * 16, h, generator=g) / h**0.5
    k_norm = 1 + 0.2 * torch.randn(1, 16, generator=g)
    angle = torch.rand(8, 4, generator=g) * 6.3
    cos_sin = torch.cat([angle.cos(), angle.sin()], dim=1)
    positions = torch.arange(t) % 8
    cache_loc = torch.arange(1, t + 1)
    pool = torch.full((1, t + 2, 2, 16), 7.0)
    return [
        ctx.to(DEVICE, dtype),
        w_kv.to(DEVICE, dtype),
        k_norm.to(DEVICE),
        cos_sin.to(DEVICE),
        positions.to(DEVICE),
        cache_loc.to(DEVICE),
        pool.to(DEVICE, dtype),
        pool.clone().to(DEVICE, dtype),
    ]


def _kv_expected(args) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of every token (T, nkv, D) in fp64 from the (rounded) inputs."""
    ctx, w_kv, k_norm, cos_sin, positions = (a.cpu() for a in args[:5])
    kv = ctx.double() @ w_kv[0].double().t()  # (T, 2*nkv*D)
    k, v = kv[:, :32].view(-1, 2, 16), kv[:, 32:].view(-1, 2, 16)
    cs = cos_sin[positions]
    return _norm_rope_fp64(k, k_norm[0], cs[:, :4], cs[:, 4:]), v


@pytest.mark.parametrize("fn", [kv_materialize, kv_materialize_ref], ids=["kernel", "oracle"])
def test_kv_materialize_zero_and_huge_rows(fn):
    """Rows 0 and 2 are zero (K = V = 0 exactly), row 1 is scaled by 1e15, row 3 is plain;
    the slots beyond them keep their poison (7)."""
    g = torch.Generator().manual_seed(1)
    ctx = torch.randn(4, 24, generator=g)
    ctx[0] = ctx[2] = 0
    ctx[1] *= 1e15
    args = _kv_args(ctx, torch.float32)
    fn(*args, eps=EPS)
    k_pool, v_pool = args[6][0].cpu(), args[7][0].cpu()
    assert torch.isfinite(k_pool).all() and torch.isfinite(v_pool).all()
    k_want, v_want = _kv_expected(args)
    for t in (0, 2):
        assert torch.equal(k_pool[1 + t], torch.zeros(2, 16))
        assert torch.equal(v_pool[1 + t], torch.zeros(2, 16))
    for t in (1, 3):
        torch.testing.assert_close(k_pool[1 + t].double(), k_want[t], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(v_pool[1 + t].double(), v_want[t], rtol=1e-4, atol=1e-4)
    assert (k_pool[[0, 5]] == 7).all() and (v_pool[[0, 5]] == 7).all()


@pytest.mark.parametrize("fn", [kv_materialize, kv_materialize_ref], ids=["kernel", "oracle"])
def test_kv_materialize_single_token_leaves_inputs_alone(fn):
    g = torch.Generator().manual_seed(2)
    args = _kv_args(torch.randn(1, 5, generator=g), torch.float32)
    before = [a.clone() for a in args[:6]]
    fn(*args, eps=EPS)
    for a, b in zip(args[:6], before):
        assert torch.equal(a, b)
    k_want, v_want = _kv_expected(args)
    torch.testing.assert_close(args[6][0, 1].cpu().double(), k_want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(args[7][0, 1].cpu().double(), v_want[0], rtol=1e-5, atol=1e-5)


def _qk_args(qkv: torch.Tensor, dtype: torch.dtype, seed: int = 0):
    """nh = 2, nkv = 1, D = 16: qkv (T, 64); slots 1..T of a pool of T + 2 poisoned with 7."""
    g = torch.Generator().manual_seed(seed)
    t = qkv.shape[0]
    q_norm, k_norm = 1 + 0.2 * torch.randn(16, generator=g), 1 + 0.2 * torch.randn(16, generator=g)
    angle = torch.rand(t, 8, generator=g) * 6.3
    cos_sin = torch.cat([angle.cos(), angle.sin()], dim=1)
    pool = torch.full((t + 2, 1, 16), 7.0)
    return [
        qkv.to(DEVICE, dtype),
        q_norm.to(DEVICE, dtype),
        k_norm.to(DEVICE, dtype),
        cos_sin.to(DEVICE),
        torch.arange(1, t + 1).to(DEVICE),
        pool.to(DEVICE, dtype),
        pool.clone().to(DEVICE, dtype),
    ]


@pytest.mark.parametrize(
    "fn", [qk_norm_rope_write, qk_norm_rope_write_ref], ids=["kernel", "oracle"]
)
@pytest.mark.parametrize("dtype,scale", [(torch.float32, 1e15), (torch.float16, 300.0)])
def test_qk_norm_rope_write_zero_and_huge_heads(fn, dtype, scale):
    """Token 0 all zero (q = k = 0 exactly, v = 0); token 1 scaled so far that its squares
    overflow fp16 (the statistics must be fp32); token 2 plain. Expected: fp64 here."""
    g = torch.Generator().manual_seed(3)
    qkv = torch.randn(3, 64, generator=g)
    qkv[0] = 0
    qkv[1] *= scale
    args = _qk_args(qkv, dtype)
    before = [a.clone() for a in args[:5]]
    q = fn(*args, num_heads=2, eps=EPS)
    for a, b in zip(args[:5], before):
        assert torch.equal(a, b)
    assert q.untyped_storage().data_ptr() != args[0].untyped_storage().data_ptr()
    k_pool, v_pool = args[5].cpu().double(), args[6].cpu().double()
    x = args[0].cpu().view(3, 4, 16)
    cs = args[3].cpu()
    q_want = _norm_rope_fp64(x[:, :2], args[1].cpu(), cs[:, :8], cs[:, 8:])
    k_want = _norm_rope_fp64(x[:, 2:3], args[2].cpu(), cs[:, :8], cs[:, 8:])
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert torch.isfinite(q).all() and torch.isfinite(k_pool).all()
    assert torch.equal(q[0].cpu(), torch.zeros(2, 16, dtype=dtype))
    assert torch.equal(k_pool[1], torch.zeros(1, 16, dtype=torch.float64))
    torch.testing.assert_close(q[1:].cpu().double(), q_want[1:], **tol)
    torch.testing.assert_close(k_pool[2:4], k_want[1:], **tol)
    assert torch.equal(v_pool[1:4], x[:, 3:4].double())  # V is a copy
    assert (k_pool[[0, 4]] == 7).all() and (v_pool[[0, 4]] == 7).all()


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
def test_gemv_zero_rows_single_element_and_huge_values():
    """A zero row of x gives a zero row; M = N = K = 1 is one product (exact in fp32);
    values of 1e18 (products 1e36) stay finite and exact up to fp32 rounding."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 40, generator=g)
    x[1] = 0
    w = torch.randn(24, 40, generator=g)
    xs, ws = x.to(DEVICE), w.to(DEVICE)
    y = gemv(xs, ws, tuning=UNTUNED)
    assert torch.equal(xs.cpu(), x) and torch.equal(ws.cpu(), w)
    assert y.untyped_storage().data_ptr() not in (
        xs.untyped_storage().data_ptr(),
        ws.untyped_storage().data_ptr(),
    )
    assert torch.equal(y[1].cpu(), torch.zeros(24))
    torch.testing.assert_close(y.cpu().double(), x.double() @ w.double().t(), rtol=1e-5, atol=1e-4)
    one = gemv(torch.tensor([[3.0]], device=DEVICE), torch.tensor([[-2.5]], device=DEVICE),
               tuning=UNTUNED)
    assert one.item() == -7.5
    big = gemv((x * 1e18).to(DEVICE), ws, tuning=UNTUNED)
    assert torch.isfinite(big).all()
    torch.testing.assert_close(
        big.cpu().double(), (x.double() * 1e18) @ w.double().t(), rtol=1e-5, atol=1e14
    )


@pytest.mark.parametrize("fn", [accept_bonus, accept_bonus_ref], ids=["kernel", "oracle"])
def test_accept_bonus_single_position_and_full_blocks(fn):
    """B = 1: nothing drafted, commit 1, the bonus is the target's choice. B = 4 with every
    draft matching: accept 3, bonus the last column. Inputs unchanged, outputs fresh."""
    cand = torch.tensor([[5]], device=DEVICE)
    top1 = torch.tensor([[9]], device=DEVICE)
    res = fn(cand, top1, torch.tensor([11], device=DEVICE))
    assert res.accept_lens.tolist() == [0] and res.commit_lens.tolist() == [1]
    assert res.bonus.tolist() == [9] and res.out_tokens.tolist() == [[9]]
    assert res.new_seq_lens.tolist() == [12]
    cand = torch.tensor([[1, 2, 3, 4], [1, 7, 3, 4]], device=DEVICE)
    top1 = torch.tensor([[2, 3, 4, 8], [2, 3, 4, 8]], device=DEVICE)
    before = cand.clone(), top1.clone()
    res = fn(cand, top1, torch.tensor([0, 3], device=DEVICE))
    assert torch.equal(cand, before[0]) and torch.equal(top1, before[1])
    assert res.accept_lens.tolist() == [3, 0] and res.bonus.tolist() == [8, 2]
    assert res.out_tokens.tolist() == [[2, 3, 4, 8], [2, 3, 4, 0]]
    assert res.new_seq_lens.tolist() == [4, 4]
    ptrs = {t.untyped_storage().data_ptr() for t in (cand, top1)}
    assert not ptrs & {t.untyped_storage().data_ptr() for t in res}


@pytest.mark.parametrize("fn", [prepare_block, prepare_block_ref], ids=["kernel", "oracle"])
def test_prepare_block_single_position_at_the_table_edge(fn):
    """B = 1 at prefix W - 1 reads the last column; at prefix W it is past the table: slot 0.
    Inputs unchanged, outputs fresh."""
    table = torch.tensor([[0, 0, 0], [4, 5, 6]], dtype=torch.int32, device=DEVICE)
    args = (
        torch.tensor([8, 9], device=DEVICE),
        torch.tensor([2, 3], device=DEVICE),
        torch.tensor([1, 1], device=DEVICE),
        table,
    )
    before = [a.clone() for a in args]
    ids, pos, loc = fn(*args, block_size=1, mask_token_id=99)
    assert ids.tolist() == [[8], [9]] and pos.tolist() == [[2], [3]]
    assert loc.tolist() == [[6], [0]]
    for a, b in zip(args, before):
        assert torch.equal(a, b)
    ids, pos, loc = fn(*args, block_size=3, mask_token_id=99)
    assert ids.tolist() == [[8, 99, 99], [9, 99, 99]] and loc.tolist() == [[6, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize("fn", [paged_attention, paged_attention_ref], ids=["kernel", "oracle"])
def test_paged_attention_one_key_zero_queries_and_huge_scores(fn):
    """Request 0 sees one key: its output is that key's value. Request 1 (5 keys) with a
    zero query: the plain mean of its values. Request 2 with scores of ~1e4: the value of
    its best key alone. Inputs unchanged, the output a fresh tensor."""
    g = torch.Generator().manual_seed(5)
    d, slots = 16, 20
    k_pool, v_pool = torch.randn(slots, 1, d, generator=g), torch.randn(slots, 1, d, generator=g)
    table = torch.randperm(slots, generator=g)[:15].view(3, 5).int()
    q = torch.randn(3, 1, 1, d, generator=g)
    q[1] = 0
    q[2] = k_pool[table[2, 3].long(), 0] * 1e4 / k_pool[table[2, 3].long(), 0].norm() ** 2
    kv_lens = torch.tensor([1, 5, 5])
    args = [
        t.to(DEVICE)
        for t in (q, k_pool, v_pool, table, torch.arange(3), (kv_lens - 1)[:, None], kv_lens)
    ]
    before = [a.clone() for a in args]
    out = fn(*args, causal=True).cpu()
    for a, b in zip(args, before):
        assert torch.equal(a, b)
    assert out.untyped_storage().data_ptr() != args[0].untyped_storage().data_ptr()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, 0, 0], v_pool[table[0, 0].long(), 0])
    torch.testing.assert_close(out[1, 0, 0], v_pool[table[1].long(), 0].mean(0))
    scores = (k_pool[table[2].long(), 0] @ q[2, 0, 0]) / d**0.5
    assert int(scores.argmax()) == 3 and float(scores.sort().values[-2]) < float(scores[3]) - 50
    torch.testing.assert_close(out[2, 0, 0], v_pool[table[2, 3].long(), 0])
