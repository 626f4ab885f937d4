"""`fused_moe` against its oracle (fp32 table; 16-bit: 2x rule on CUDA, the elementwise
table under the CPU interpreter, which truncates), over E, k and token counts, with experts
that get no token and all tokens routed to one expert; the oracle against a per-token sum;
the expert grouping; no host sync and CUDA-graph capture on the GPU. Tiny shapes: the CPU
runs TRITON_INTERPRET=1."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note
from hypothesis import strategies as st

from kernels import fused_moe, fused_moe_ref
from kernels.fused_moe.kernel import MoeConfig, align, default_config
from tests.strategies import sized
from workbench.numerics import assert_close, assert_two_x

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CONFIGS = (None, MoeConfig(16, 16, 16, 4, 1), MoeConfig(16, 32, 16, 4, 2),
           MoeConfig(32, 16, 32, 4, 2))
ROUTINGS = ("random", "one expert", "half the experts idle")


def routing(m: int, experts: int, k: int, mode: str, g: torch.Generator):
    """(weights (m, k) fp32 summing to 1, ids (m, k), k distinct experts per token)."""
    scores = torch.rand(m, experts, generator=g)
    if mode == "one expert":
        scores[:, 0] = 2.0  # every token's first choice
    elif mode == "half the experts idle":
        scores[:, experts // 2:] -= 2.0  # only reachable when k > experts // 2
    weights, ids = scores.softmax(-1).topk(k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids


@st.composite
def moe_cases(draw):
    experts = draw(st.one_of(st.sampled_from([1, 4, 8]), sized(1, 9)))
    k = draw(st.integers(1, min(experts, 4)))
    m = draw(st.one_of(st.sampled_from([0, 1, 16]), sized(0, 24)))
    h = draw(st.one_of(st.sampled_from([16, 32]), sized(1, 40)))
    f = draw(st.one_of(st.sampled_from([16, 24]), sized(1, 40)))
    mode = draw(st.sampled_from(ROUTINGS))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    config = draw(st.sampled_from(CONFIGS))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"fused_moe: M={m} E={experts} k={k} H={h} F={f} {mode=} {dtype=} {config=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, h, generator=g)
    w_gate_up = torch.randn(experts, 2 * f, h, generator=g) / h**0.5
    w_down = torch.randn(experts, h, f, generator=g) / f**0.5
    weights, ids = routing(m, experts, k, mode, g)
    to = dict(device=DEVICE, dtype=dtype)
    return (x.to(**to), w_gate_up.to(**to), w_down.to(**to), weights.to(DEVICE),
            ids.to(DEVICE)), config


@given(moe_cases())
def test_fused_moe_matches_the_oracle(case):
    args, config = case
    x, w_gate_up, w_down, weights, ids = args
    got = fused_moe(*args, config=config) if config else fused_moe(*args)
    assert got.shape == x.shape and got.dtype == x.dtype
    fp32 = fused_moe_ref(x.float(), w_gate_up.float(), w_down.float(), weights, ids)
    if x.dtype == torch.float32:
        assert_close(got, fp32, kind="reduction", name="out")
    elif DEVICE == "cpu":
        assert_close(got, fp32, dtype=x.dtype, name="out")
    else:
        assert_two_x(got, fp32, fused_moe_ref(*args), name="out")


@given(moe_cases())
def test_oracle_is_the_routed_sum_of_expert_mlps(case):
    """Each token: the weighted sum over its k experts of down(silu(gate) * up), token by
    token, in fp64."""
    x, w_gate_up, w_down, weights, ids = (a.cpu() for a in case[0])
    x, w_gate_up, w_down = x.double(), w_gate_up.double(), w_down.double()
    want = torch.zeros_like(x)
    for m in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[m, j])
            gate, up = (w_gate_up[e] @ x[m]).chunk(2)
            want[m] += float(weights[m, j]) * (w_down[e] @ (F.silu(gate) * up))
    assert_close(fused_moe_ref(x, w_gate_up, w_down, weights.double(), ids), want,
                 kind="reduction", name="oracle")


@given(st.integers(0, 40), st.integers(1, 9), st.integers(1, 3), st.sampled_from([1, 4, 16]),
       st.sampled_from(ROUTINGS), st.integers(0, 2**31 - 1))
def test_align_groups_every_pair_once_by_expert(m, experts, k, bm, mode, seed):
    k = min(k, experts)
    _, ids = routing(m, experts, k, mode, torch.Generator().manual_seed(seed))
    pairs, block_expert = align(ids, experts, bm)
    n = m * k
    real = pairs[pairs < n]
    assert sorted(real.tolist()) == list(range(n))  # every (token, slot) pair exactly once
    flat = ids.reshape(-1)
    for b, e in enumerate(block_expert.tolist()):
        rows = pairs[b * bm:(b + 1) * bm]
        rows = rows[rows < n]
        if e < 0:
            assert rows.numel() == 0
        else:
            assert rows.numel() > 0 and (flat[rows] == e).all()
    counts = torch.bincount(flat, minlength=experts)
    assert int((block_expert >= 0).sum()) == int(((counts + bm - 1) // bm).sum())


def test_default_config_grows_its_blocks_with_tokens_per_expert():
    sizes = [default_config(pairs, 128).bm for pairs in (8, 128 * 16, 128 * 64, 128 * 512)]
    assert sizes == sorted(sizes) and sizes[0] == 16 and sizes[-1] == 128


@pytest.mark.gpu
def test_fused_moe_never_syncs_and_replays_in_a_cuda_graph():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(24, 256, device="cuda", generator=g).bfloat16()
    w_gate_up = (torch.randn(16, 256, 256, device="cuda", generator=g) / 16).bfloat16()
    w_down = (torch.randn(16, 256, 128, device="cuda", generator=g) / 11).bfloat16()
    weights, ids = torch.rand(24, 16, device="cuda", generator=g).softmax(-1).topk(4, dim=-1)
    want = fused_moe(x, w_gate_up, w_down, weights, ids)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fused_moe(x, w_gate_up, w_down, weights, ids)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_moe(x, w_gate_up, w_down, weights, ids)
    x.copy_(x.flip(0))
    graph.replay()
    assert torch.equal(out, fused_moe(x, w_gate_up, w_down, weights, ids))
    assert not torch.equal(out, want)


@pytest.mark.parametrize("m,experts,k,mode", [(0, 4, 2, "random"), (9, 4, 1, "one expert"),
                                              (12, 8, 3, "one expert"),
                                              (5, 8, 2, "half the experts idle")])
def test_edge_routings_match_the_oracle(m, experts, k, mode):
    """No tokens at all, every token on one expert (the others empty), idle experts."""
    g = torch.Generator().manual_seed(m + experts)
    x = torch.randn(m, 24, generator=g, device="cpu").to(DEVICE)
    w_gate_up = (torch.randn(experts, 40, 24, generator=g) / 5).to(DEVICE)
    w_down = (torch.randn(experts, 24, 20, generator=g) / 4).to(DEVICE)
    weights, ids = (t.to(DEVICE) for t in routing(m, experts, k, mode, g))
    if mode == "one expert" and k == 1:
        assert (ids == 0).all()
    got = fused_moe(x, w_gate_up, w_down, weights, ids, config=MoeConfig(16, 16, 16, 4, 1))
    assert_close(got, fused_moe_ref(x, w_gate_up, w_down, weights, ids), kind="reduction",
                 name="out")


def test_sweep_reports_the_efficiency_curve_it_measured():
    """kernels/fused_moe/bench.py's sweep on a tiny shape (the GPU run's code path): one row
    per tokens-per-expert point with balanced routing, efficiency = FLOPs / time / peak."""
    from kernels.fused_moe import bench

    shape = dict(experts=2, top_k=1, hidden=16, width=16)
    out = bench.sweep(shape, (1, 3), device=DEVICE, copy_bw=1e11, peak=1e12)
    rows = out["rows"]
    assert [r["tokens"] for r in rows] == [2, 6] and all(r["experts_hit"] == 2 for r in rows)
    assert out["moe_experts"]["tokens_per_expert"] == [1.0, 3.0]
    for r, eff in zip(rows, out["moe_experts"]["efficiency"]):
        assert r["flops"] == 6 * r["tokens"] * 16 * 16
        assert eff == pytest.approx(r["flops"] / (r["kernel_us"] * 1e-6) / 1e12)
    assert out["decode_bs1"]["tokens"] == 1
