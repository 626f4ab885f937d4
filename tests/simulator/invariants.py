"""Invariants asserted at every iteration of every simulated run in tests/simulator.

`install(monkeypatch)` wraps `Replica.commit` (each finished iteration) and `Cluster.run`
(each whole run); tests/simulator/conftest.py installs it for every test. What it asserts,
each recomputed here from the round outcomes rather than read from the engine's own sums:

- reservation: every KV position a decode round writes, [committed before the round,
  + its verify length), lies inside the request's reservation once the stretch is launched
  (reservations never shrink, so this is the GPU never writing outside what the pool holds
  for it; it covers ISD's 2N-1 written slots and the overlap host's one-round lag);
- KV: free + reserved = capacity, free >= 0, reserved >= committed >= the host's view, after
  every iteration; a free slot holds nothing;
- slots: free and occupied slots partition the table; occupied ones are active;
- tokens: a request never emits more than its output length, nor more than it generated;
- counters: verified tokens = the sum of every launched round's verify lengths; request
  rounds + wasted rows = launched row-rounds; the per-request rounds add up to the request
  rounds; when every request finished, committed tokens = output tokens - one per prefill
  (a request's first, and each recompute of a retracted one, emit a token), plus in overlap
  mode at most one round per retraction (the round in flight, whose results are dropped).
"""

from __future__ import annotations

import numpy as np

from simulator.cluster import Cluster
from simulator.replica import Replica


class Tally:
    """Per-replica sums the checker keeps, independently of the replica's counters."""

    def __init__(self) -> None:
        self.verified = 0
        self.row_rounds = 0
        self.iterations = 0


def _tally(rep: Replica) -> Tally:
    if not hasattr(rep, "_test_tally"):
        rep._test_tally = Tally()
    return rep._test_tally


def check_stretch_writes(rep: Replica, it) -> None:
    """Before the stretch is applied: every row's writes fit its reservation after it."""
    st, c, rows = rep.slots, it.commits, it.rows
    L, n = c.c_raw.shape
    before = st.seq[rows] + np.concatenate(
        [np.zeros((1, n), dtype=np.int64), np.cumsum(c.c_raw, axis=0)[:-1]]
    )
    q = np.broadcast_to(it.q, (L, n))
    reserved = np.maximum(c.res0, c.reserved_after)
    end = (before + q).max(axis=0)
    bad = np.flatnonzero(end > reserved)
    assert not bad.size, (
        f"a round writes KV up to position {end[bad[0]]} but slot {rows[bad[0]]} reserves "
        f"{reserved[bad[0]]} (committed {st.seq[rows[bad[0]]]}, verify length "
        f"{q[:, bad[0]].max()}, reserve {rep.reserve_tokens})"
    )
    t = _tally(rep)
    t.verified += int(q.sum())
    t.row_rounds += L * n


def check_state(rep: Replica) -> None:
    """After an iteration: KV accounting, slot partition, token bounds."""
    st = rep.slots
    _tally(rep).iterations += 1
    assert st.kv_free >= 0, f"KV over-committed: {st.kv_free} free"
    assert st.kv_free + int(st.reserved.sum()) == st.capacity
    active = st.active
    assert st.n_active == int(active.sum())
    free = np.zeros(len(active), dtype=bool)
    free[st.free_slots] = True
    assert len(st.free_slots) == int(free.sum()) and (free == ~active).all(), "slot table"
    assert not st.reserved[~active].any() and (st.rid[~active] == -1).all()
    a = np.flatnonzero(active)
    assert (st.reserved[a] >= st.seq[a]).all(), "a request holds less KV than it committed"
    assert (st.seq[a] >= st.host_seq[a]).all(), "the host is ahead of the GPU"
    assert (st.emitted[a] <= st.out[a]).all() and (st.emitted[a] <= st.gen[a]).all()
    assert set(st.prefilling) <= set(a.tolist())


def check_run(cluster: Cluster) -> None:
    """After a run: the counters against the checker's own sums."""
    req = cluster.req
    all_done = bool(np.isfinite(req.finish_s).all())
    rounds_in_flight = 0
    for rep in cluster.replicas:
        t = _tally(rep)
        assert rep.verified_tokens == t.verified, (rep.verified_tokens, t.verified)
        assert rep.request_rounds + rep.wasted_rows == t.row_rounds
        assert int(rep.commit_hist.sum()) == rep.request_rounds
        st = rep.slots
        rounds_in_flight += int(st.rounds[st.active].sum())
    request_rounds = sum(rep.request_rounds for rep in cluster.replicas)
    assert int(req.decode_rounds.sum()) + rounds_in_flight == request_rounds
    if all_done and len(req):  # a prefill (the first, or a retracted request's recompute)
        committed = sum(rep.committed_tokens for rep in cluster.replicas)  # emits one token
        retracted = int(req.preemptions.sum())
        extra = committed - (int(req.output_tokens.sum()) - len(req) - retracted)
        # overlap: a request retracted with a round in flight loses that round's commits
        lost = retracted * cluster.replicas[0].method.max_query * cluster.replicas[0].lag
        assert 0 <= extra <= lost, (committed, extra, lost)


def install(monkeypatch) -> None:
    """Check every iteration of every replica and every finished run."""
    commit, run = Replica.commit, Cluster.run

    def checked_commit(self, it):
        if it.kind == "decode":
            check_stretch_writes(self, it)
        commit(self, it)
        check_state(self)

    def checked_run(self):
        run(self)
        check_run(self)

    monkeypatch.setattr(Replica, "commit", checked_commit)
    monkeypatch.setattr(Cluster, "run", checked_run)
