"""`paged_attention` against its oracle, against dense SDPA, and on bad input."""

import pytest
import torch
from hypothesis import given

from kernels.paged_attention import kernel, rules
from kernels.paged_attention.kernel import paged_attention
from kernels.paged_attention.ref import paged_attention_ref, paged_attention_sdpa
from tests.kernels.launches import record_launches
from tests.strategies import attention_cases
from workbench.numerics import assert_close, assert_two_x

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32] if DEVICE == "cpu" else [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("splits, key_tile, early",
                         [(None, None, False), (3, None, False), (2, 64, False),
                          (3, None, True)])
@pytest.mark.parametrize("dtype", DTYPES)
@given(case=attention_cases())
def test_paged_attention_matches_ref(case, dtype, splits, key_tile, early):
    """Also with the key range split over 3 programs and merged (flash-decoding), over 2
    programs that take 64 keys a step, and over 3 with the early K/V and slot loads."""
    args, kw = case.args(dtype, DEVICE)
    with rules.forced(splits=splits, key_tile=key_tile, early_loads=early):
        got = paged_attention(*args, **kw)
    fp32_args, _ = case.args(dtype, DEVICE)
    want = paged_attention_ref(*(a.float() if a.is_floating_point() else a for a in fp32_args),
                               **kw)
    assert got.shape == want.shape and got.dtype == dtype
    if got.numel() == 0:
        return
    if dtype == torch.float32:
        assert_close(got, want, kind="reduction", name="out")
    else:
        low = paged_attention_sdpa(*args, **kw)
        assert_two_x(got.float(), want, low.float(), name="out")


@pytest.mark.parametrize("splits", [None, 1, 3])
@given(case=attention_cases())
def test_early_loads_change_no_bit(case, splits):
    """EARLY_LOADS moves loads, not arithmetic: the output is bitwise the plain loop's."""
    args, kw = case.args(torch.float32 if DEVICE == "cpu" else torch.bfloat16, DEVICE)
    with rules.forced(splits=splits, early_loads=False):
        want = paged_attention(*args, **kw)
    with rules.forced(splits=splits, early_loads=True):
        got = paged_attention(*args, **kw)
    assert torch.equal(got, want)


@pytest.mark.parametrize("splits, early", [(None, False), (3, True)])
@given(case=attention_cases())
def test_unmasked_body_changes_no_bit(case, splits, early):
    """UNMASKED_BODY drops masks only where they keep every score: the output is bitwise
    that of the loop that masks every step (16 keys a step: several unmasked steps)."""
    args, kw = case.args(torch.float32 if DEVICE == "cpu" else torch.bfloat16, DEVICE)
    with rules.forced(splits=splits, key_tile=16, early_loads=early, unmasked_body=True):
        got = paged_attention(*args, **kw)
    with rules.forced(splits=splits, key_tile=16, early_loads=early, unmasked_body=False):
        want = paged_attention(*args, **kw)
    assert torch.equal(got, want)


def test_early_loads_rule_takes_launches_of_one_query_tile(monkeypatch):
    """EARLY_LOADS None (the default): the kernel is launched with EARLY for at most 64
    query rows per KV head (T * nh / nkv), the plain loop above; True / False force it."""
    launched = record_launches(monkeypatch, kernel, "_paged_attention_kernel", with_kwargs=True)
    g = torch.Generator().manual_seed(0)
    nh, nkv, d = 8, 2, 16  # 4 query heads per KV head
    k_pool, v_pool = (torch.randn(40, nkv, d, generator=g).to(DEVICE) for _ in range(2))
    table = torch.arange(40, device=DEVICE).view(1, 40)
    for t in (1, 16, 17):
        q = torch.randn(1, t, nh, d, generator=g).to(DEVICE)
        pos = torch.arange(20, 20 + t, device=DEVICE).view(1, t)
        lens = torch.tensor([20 + t], device=DEVICE)
        rows = torch.zeros(1, dtype=torch.long, device=DEVICE)
        paged_attention(q, k_pool, v_pool, table, rows, pos, lens, causal=True)
        for forced in (False, True):
            with rules.forced(early_loads=forced):
                paged_attention(q, k_pool, v_pool, table, rows, pos, lens, causal=True)
    seen = [kw["EARLY"] for _, kw in launched]
    assert seen == [True, False, True, True, False, True, False, False, True]


@given(case=attention_cases())
def test_ref_equals_dense_causal_attention_of_each_request(case):
    """The oracle itself: row by row, plain softmax over the gathered visible keys."""
    (q, k_pool, v_pool, table, rows, pos, kv_lens), kw = case.args(torch.float64, "cpu")
    out = paged_attention_ref(q, k_pool, v_pool, table, rows, pos, kv_lens, **kw)
    nh, nkv = q.shape[2], k_pool.shape[1]
    for b in range(q.shape[0]):
        for t in range(q.shape[1]):
            w = torch.arange(table.shape[1])
            vis = w < kv_lens[b]
            if kw["causal"]:
                vis &= w <= pos[b, t]
            if kw["window"] is not None:
                vis &= pos[b, t] - w < kw["window"]
            s = table[rows[b], vis].long()
            for i in range(nh):
                k, v = k_pool[s, i // (nh // nkv)], v_pool[s, i // (nh // nkv)]
                want = (torch.softmax(k @ q[b, t, i] / q.shape[-1] ** 0.5, 0) @ v
                        if s.numel() else torch.zeros_like(q[b, t, i]))
                torch.testing.assert_close(out[b, t, i], want)


def _good() -> tuple[tuple, dict]:
    q = torch.randn(2, 3, 4, 32, device=DEVICE)
    pool = torch.randn(50, 2, 32, device=DEVICE)
    table = torch.arange(40, dtype=torch.int32, device=DEVICE).view(2, 20)
    ints = lambda *v: torch.tensor(v, device=DEVICE)  # noqa: E731
    return ((q, pool, pool.clone(), table, ints(0, 1), ints([5, 6, 7], [1, 2, 3]), ints(8, 4)),
            dict(causal=True))


@pytest.mark.parametrize("index, bad, name", [
    (0, lambda t: t[0], "q"),
    (1, lambda t: t.half(), "k_pool"),
    (2, lambda t: t[:, :1], "v_pool"),
    (3, lambda t: t.float(), "req_to_token"),
    (4, lambda t: t[:1], "req_rows"),
    (5, lambda t: t[:, :2], "positions"),
    (6, lambda t: t[:, None], "kv_lens"),
])
def test_bad_input_names_the_argument(index, bad, name):
    args, kw = _good()
    args = list(args)
    args[index] = bad(args[index])
    with pytest.raises(ValueError, match=name):
        paged_attention(*args, **kw)
    with pytest.raises(ValueError, match="window"):
        paged_attention(*_good()[0], causal=True, window=0)
