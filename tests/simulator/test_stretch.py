"""Stretch arithmetic: where a stretch is cut, what it commits and reserves, and the
host/GPU timelines of sync and overlap modes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.stretch import plan_commits, timeline_overlap, timeline_sync


@st.composite
def stretches(draw):
    n = draw(st.integers(1, 12))
    B = draw(st.integers(1, 16))
    K = draw(st.integers(1, 40))
    lag = draw(st.sampled_from([0, 1]))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    c_raw = rng.integers(1, B + 1, size=(K, n))
    out = rng.integers(1, 300, size=n)
    gen0 = rng.integers(1, 300, size=n) if lag else np.minimum(rng.integers(1, 300, n), out - 1)
    gen0 = np.maximum(gen0, 0)
    seq0 = rng.integers(1, 2000, size=n)
    host_seq0 = seq0 - (rng.integers(0, B + 1, size=n) if lag else 0)
    reserve = (1 + lag) * B
    res0 = np.maximum(seq0, host_seq0 + reserve) + rng.integers(0, 5, size=n)
    kv_free = draw(st.integers(0, 20 * n * B))
    return c_raw, gen0, out, seq0, host_seq0, res0, kv_free, reserve, lag, B


@given(stretches())
def test_plan_commits_invariants(args):
    c_raw, gen0, out, seq0, host_seq0, res0, kv_free, reserve, lag, B = args
    c = plan_commits(c_raw, gen0, out, seq0, host_seq0, res0, kv_free, reserve, lag)
    L = c.length
    # the batch stays fixed: no request finishes before the last round (+ lag)
    fin = c.fin_round
    assert L == 0 or fin.min() >= L - 1 - lag
    # every round's KV fits: the reservation covers the block the GPU writes
    for k in range(L):
        need = np.maximum(res0, c.host_view(k) + reserve)
        assert (need >= c.kv[k] + B).all()
        assert (need - res0).sum() <= kv_free
    # tokens: emitted never exceed what the request still needs
    emitted = c.c_eff.sum(axis=0)
    assert (emitted <= np.maximum(out - gen0, 0)).all()
    assert ((c.c_eff > 0) == c.live).all()
    np.testing.assert_array_equal(c.seq_after - c.kv, c.c_raw)


def test_stretch_stops_at_first_finish_sync_and_one_round_later_overlap():
    c_raw = np.full((10, 2), 2)
    args = dict(gen0=np.array([0, 0]), out=np.array([5, 100]), seq0=np.array([10, 10]),
                res0=np.array([100, 100]), kv_free=10_000, reserve=4)
    sync = plan_commits(c_raw, host_seq0=np.array([10, 10]), lag=0, **args)
    assert sync.length == 3 and sync.c_eff[:, 0].tolist() == [2, 2, 1]
    over = plan_commits(c_raw, host_seq0=np.array([10, 10]), lag=1, **args)
    assert over.length == 4 and over.c_eff[:, 0].tolist() == [2, 2, 1, 0]  # a wasted row
    assert over.live[:, 0].tolist() == [True, True, True, False]


def test_stretch_stops_before_kv_runs_out():
    c_raw = np.full((10, 1), 4)
    c = plan_commits(c_raw, np.array([0]), np.array([1000]), np.array([0]), np.array([0]),
                     np.array([4]), kv_free=10, reserve=4, lag=0)
    assert c.length == 3  # round k needs 4k + 4 slots: 8, 12, 16 -> growth 4, 8 fits; 12 not


def test_sync_timeline_is_sequential():
    H, s, e = timeline_sync(1.0, 0.1, np.array([1.0, 2.0]), 0.01, 0.2)
    np.testing.assert_allclose(H, [1.0, 2.31, 4.62])
    np.testing.assert_allclose(s, [1.1, 2.41])
    np.testing.assert_allclose(e, [2.1, 4.41])


def test_overlap_timeline_hides_host_work_behind_the_gpu():
    gpu = np.array([1.0, 1.0, 1.0])
    H, s, e = timeline_overlap(0.0, 0.1, gpu, 0.01, 0.2, -np.inf, None)
    np.testing.assert_allclose(s, [0.1, 1.1, 2.1])  # back to back: no bubble
    np.testing.assert_allclose(e, [1.1, 2.1, 3.1])
    assert H[1] == 0.1  # nothing pending: the host plans the next round right away
    np.testing.assert_allclose(H[2:], [1.31, 2.31])  # round k processed after its copy
    Hs, ss, es = timeline_sync(0.0, 0.1, gpu, 0.01, 0.2)
    assert e[-1] < es[-1]


@given(st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=20), st.floats(0, 0.5),
       st.floats(0, 0.5), st.floats(0, 0.1), st.booleans())
def test_overlap_never_later_than_sync(gpu, plan, proc, copy, pending):
    gpu = np.array(gpu)
    H, s, e = timeline_overlap(0.0, plan, gpu, copy, proc, 0.0, proc if pending else None)
    Hs, ss, es = timeline_sync(0.0, plan, gpu, copy, proc)
    assert (np.diff(s) >= gpu[:-1] - 1e-12).all()  # one round at a time on the GPU
    assert e[-1] <= es[-1] + 1e-9


def _overlap_reference(now, plan, gpu, copy, proc, gpu_free, pend):
    """Iteration by iteration, as the docstring of timeline_overlap states it."""
    H, start, end = [now], [], []
    h, prev_end = now, gpu_free
    for k, g in enumerate(gpu):
        a = h + plan
        s = max(a, prev_end)
        start.append(s)
        end.append(s + g)
        if k == 0:
            h = a if pend is None else max(a, prev_end + copy) + pend
        else:
            h = max(a, prev_end + copy) + proc
        prev_end = s + g
        H.append(h)
    return np.array(H), np.array(start), np.array(end)


@given(st.lists(st.floats(1e-5, 0.05), min_size=1, max_size=30), st.floats(0, 0.01),
       st.floats(0, 0.01), st.floats(0, 0.002), st.floats(-1.0, 0.05),
       st.one_of(st.none(), st.floats(0, 0.01)))
def test_overlap_timeline_matches_its_definition(gpu, plan, proc, copy, gpu_free, pend):
    got = timeline_overlap(0.0, plan, np.array(gpu), copy, proc, gpu_free, pend)
    want = _overlap_reference(0.0, plan, gpu, copy, proc, gpu_free, pend)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_a_prefill_launch_bounds_its_step():
    """The GPU starts on the first kernels, cannot end before the last is launched; the host
    processes the pending round after launching; a fast launch changes nothing."""
    gpu = np.array([0.002])
    H, s, e = timeline_overlap(1.0, 0.1, gpu, 0.01, 0.2, 1.05, 0.3, launch_s=0.5)
    np.testing.assert_allclose(s, [1.1])  # first kernels after planning (GPU free at 1.05)
    np.testing.assert_allclose(e, [1.6])  # not before the launch ends at 1.1 + 0.5
    np.testing.assert_allclose(H, [1.0, 1.9])  # launched at 1.6, then the pending 0.3
    fast = timeline_overlap(1.0, 0.1, gpu, 0.01, 0.2, 1.05, 0.3, launch_s=1e-4)
    np.testing.assert_allclose(fast[2], [1.102])
    np.testing.assert_allclose(fast[0], [1.0, 1.1001 + 0.3])  # max(launched, free + copy) + pend
    with pytest.raises(ValueError):
        timeline_overlap(0.0, 0.1, np.ones(2), 0.01, 0.2, 0.0, None, launch_s=0.1)
