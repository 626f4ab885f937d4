"""Applying finished iterations to a replica: GPU-side effects of the launched rounds, host
processing of their results (token emission, first tokens, finishes), preemption, and the
replica's counters (busy times, bubbles, commit histogram, inter-token latencies).

A `Record` is one round whose results the host has yet to process (overlap mode keeps the
last launched round as `pending` until the next iteration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simulator.replica import Iteration


@dataclass(slots=True)
class Record:
    """A launched round's results, per row: slot, its epoch at launch, tokens to emit, whether
    that is the first token, whether the request finishes, the committed length to publish."""

    slots: np.ndarray
    epochs: np.ndarray
    c_eff: np.ndarray
    first: np.ndarray | None
    fin: np.ndarray
    host_seq: np.ndarray | None
    proc_s: float
    releases: int


class RoundsMixin:
    """Result application and counters; mixed into `Replica`."""

    def init_stats(self, block_size: int) -> None:
        self.gpu_busy_s = self.host_busy_s = self.bubble_s = 0.0
        self.decode_rounds = self.prefill_rounds = 0
        self.verified_tokens = self.committed_tokens = 0
        self.request_rounds = self.wasted_rows = self.preemptions = 0
        self.commit_hist = np.zeros(block_size + 1, dtype=np.int64)
        self.itl_gaps: list[np.ndarray] = []  # one sample each
        self.itl_values: list[np.ndarray] = []  # with weights (shared gaps of a stretch)
        self.itl_weights: list[np.ndarray] = []

    def commit(self, it: Iteration) -> None:
        """Apply a finished iteration (its end is env.now)."""
        self._account_gpu(it)
        if it.kind == "decode":
            self._launch_stretch(it)
        if self.lag:
            if self.pending is not None:
                self._process(self.pending, float(it.H[1]))
                self.host_busy_s += self.pending.proc_s
            self.pending = it.record if it.kind == "prefill" else None
        elif it.kind == "prefill":
            self._process(it.record, float(it.H[1]))
            self.host_busy_s += it.proc_s
        if it.kind == "decode":
            self._process_stretch(it)
        if it.kind == "prefill":
            self.prefill_rounds += 1

    def _account_gpu(self, it) -> None:
        n = len(it.gpu_s)
        if not n:
            return
        start, end = it.start, it.end
        first, last = float(start[0]), float(end[-1])
        if self.gpu_free > -np.inf:
            self.bubble_s += first - self.gpu_free
        s_sum, e_sum = float(start.sum()), float(end.sum())
        self.bubble_s += (s_sum - first) - (e_sum - last)  # gaps between this stretch's rounds
        self.gpu_busy_s += e_sum - s_sum
        self.host_busy_s += it.plan_s * n
        self.gpu_free = last

    def _launch_stretch(self, it) -> None:
        """GPU-side effects of the stretch's rounds: KV, lengths, counters."""
        st, c, rows = self.slots, it.commits, it.rows
        L, n = c.length, len(rows)
        eff = c.c_eff.sum(axis=0)
        st.seq[rows] = c.seq_after[-1]
        st.gen[rows] += eff
        reserved = c.reserved_after
        st.kv_free -= int((reserved - c.res0).sum())
        st.reserved[rows] = reserved
        live = c.live
        raw_live = c.c_raw[live]
        per_row = live.sum(axis=0)
        st.rounds[rows] += per_row
        # raw commits of live rounds = emitted tokens + the overshoot of a finishing round
        raw = eff
        if c.first_finish < L:
            k = c.fin_round
            fin = np.flatnonzero((k >= 0) & (k < L))
            raw = eff.copy()
            raw[fin] += c.c_raw[k[fin], fin] - c.c_eff[k[fin], fin]
        st.commit_sum[rows] += raw
        self.acceptance.advance(rows, L)
        n_live = raw_live.size
        self.decode_rounds += L
        self.verified_tokens += int(it.q.sum()) * (L if it.q.ndim == 1 else 1)
        self.committed_tokens += int(eff.sum())
        self.request_rounds += n_live
        self.wasted_rows += L * n - n_live
        self.commit_hist += np.bincount(raw_live, minlength=len(self.commit_hist))

    def _process_stretch(self, it) -> None:
        """Host processing of the stretch's rounds; overlap keeps the last one pending."""
        st, c, rows = self.slots, it.commits, it.rows
        L, lag = c.length, self.lag
        n_proc = L - lag
        if lag:
            self.pending = Record(rows, it.epochs, c.c_eff[-1], None, c.fin_round == L - 1,
                                  c.seq_after[-1], it.proc_s, it.releases)
        if n_proc <= 0:
            return
        self.host_busy_s += it.proc_s * n_proc
        T = it.H[1 + lag: 1 + lag + n_proc]
        ce, seq, fr = c.c_eff[:n_proc], c.seq_after[n_proc - 1], c.fin_round
        if st.releases != it.releases:  # overlap: rows freed processing the pending round
            valid = st.epoch[rows] == it.epochs
            rows, ce, seq, fr = rows[valid], ce[:, valid], seq[valid], fr[valid]
        st.emitted[rows] += ce.sum(axis=0)
        st.host_seq[rows] = seq
        self.itl_gaps.append(T[0] - st.last_emit[rows[ce[0] > 0]])
        if n_proc > 1:
            self.itl_values.append(np.diff(T))
            self.itl_weights.append(np.count_nonzero(ce[1:], axis=1).astype(np.float64))
        st.last_emit[rows] = T[-1]
        if c.first_finish < n_proc:
            fin = (fr >= 0) & (fr < n_proc)
            self._finish(rows[fin], T[fr[fin]])

    def _process(self, rec: Record, t: float) -> None:
        """Host processing of one round's results at time t."""
        st = self.slots
        slots, ce, first, fin, seq = rec.slots, rec.c_eff, rec.first, rec.fin, rec.host_seq
        if not slots.size:
            return
        if st.releases != rec.releases:  # requests finished or preempted meanwhile
            valid = st.epoch[slots] == rec.epochs
            slots, ce, fin = slots[valid], ce[valid], fin[valid]
            first = None if first is None else first[valid]
            seq = None if seq is None else seq[valid]
        st.emitted[slots] += ce
        if seq is not None:
            st.host_seq[slots] = seq
        emitting = slots[ce > 0]
        if first is not None and first.any():  # a prefill's first tokens: TTFT, not ITL
            self.req.first_token_s[st.rid[slots[first]]] = t
            gaps = slots[~first & (ce > 0)]
        else:
            gaps = emitting
        self.itl_gaps.append(t - st.last_emit[gaps])
        st.last_emit[emitting] = t
        if fin.any():
            self._finish(slots[fin], np.full(int(fin.sum()), t))

    def _finish(self, slots: np.ndarray, t: np.ndarray) -> None:
        st, req = self.slots, self.req
        rids = st.rid[slots].copy()
        req.finish_s[rids] = t
        req.decode_rounds[rids] += st.rounds[slots]
        req.committed_tokens[rids] += st.commit_sum[slots]
        st.release(slots)
        self.on_finish(rids, t)

    def retract(self, slots: np.ndarray) -> None:
        """Preempt: free the KV, keep the emitted tokens, requeue at the front (recompute)."""
        st, req = self.slots, self.req
        rids = st.rid[slots].copy()
        for slot, rid in zip(slots.tolist(), rids.tolist(), strict=True):
            self.resume[rid] = (int(st.emitted[slot]), float(st.last_emit[slot]))
        req.preemptions[rids] += 1
        req.decode_rounds[rids] += st.rounds[slots]
        req.committed_tokens[rids] += st.commit_sum[slots]
        self.preemptions += len(rids)
        st.release(slots)
        self.waiting.extendleft(rids.tolist()[::-1])
