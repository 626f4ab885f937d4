"""Applying finished iterations to a replica: GPU-side effects of the launched rounds, host
processing of their results (token emission, first tokens, finishes), preemption, and the
replica's counters (busy times, bubbles, commit histogram, inter-token latencies).

A `Record` is one round whose results the host has yet to process (overlap mode keeps the
last launched round as `pending` until the next iteration).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Record:
    """A launched round's results, per row: slot, its epoch at launch, tokens to emit, whether
    that is the first token, whether the request finishes, the committed length to publish."""

    slots: np.ndarray
    epochs: np.ndarray
    c_eff: np.ndarray
    first: np.ndarray
    fin: np.ndarray
    host_seq: np.ndarray | None
    proc_s: float


class RoundsMixin:
    """Result application and counters; mixed into `Replica`."""

    def init_stats(self, block_size: int) -> None:
        self.gpu_busy_s = self.host_busy_s = self.bubble_s = 0.0
        self.decode_rounds = self.prefill_rounds = 0
        self.verified_tokens = self.committed_tokens = self.raw_commits = 0
        self.request_rounds = self.wasted_rows = self.preemptions = 0
        self.commit_hist = np.zeros(block_size + 1, dtype=np.int64)
        self.itl_values: list[np.ndarray] = []
        self.itl_weights: list[np.ndarray] = []

    def commit(self, it) -> None:
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
        if not len(it.gpu_s):
            return
        n = len(it.gpu_s)
        prev = np.concatenate([[self.gpu_free], it.end[:-1]])
        gaps = it.start - prev
        self.bubble_s += float(gaps[np.isfinite(gaps)].sum())
        self.gpu_busy_s += float(it.gpu_s.sum())
        self.host_busy_s += it.plan_s * n
        self.gpu_free = float(it.end[-1])

    def _launch_stretch(self, it) -> None:
        st, c, rows = self.slots, it.commits, it.rows
        L = c.length
        st.seq[rows] = c.seq_after[-1]
        st.gen[rows] += c.c_eff.sum(axis=0)
        st.reserve_to(rows, c.reserved_after)
        live = c.live
        raw_live = c.c_raw[live]
        st.rounds[rows] += live.sum(axis=0)
        st.commit_sum[rows] += (c.c_raw * live).sum(axis=0)
        self.acceptance.advance(rows, L)
        self.decode_rounds += L
        self.verified_tokens += int(it.q.sum()) * L
        self.committed_tokens += int(c.c_eff.sum())
        self.raw_commits += int(raw_live.sum())
        self.request_rounds += int(raw_live.size)
        self.wasted_rows += int(live.size - raw_live.size)
        self.commit_hist += np.bincount(raw_live, minlength=len(self.commit_hist))

    def _process_stretch(self, it) -> None:
        """Host processing of the stretch's rounds; overlap keeps the last one pending."""
        st, c, rows = self.slots, it.commits, it.rows
        L, lag = c.length, self.lag
        n_proc = L - lag
        if lag:
            self.pending = Record(rows, it.epochs, c.c_eff[-1], np.zeros(len(rows), bool),
                                  c.fin_round == L - 1, c.seq_after[-1], it.proc_s)
        if n_proc <= 0:
            return
        self.host_busy_s += it.proc_s * n_proc
        T = it.H[1 + lag: 1 + lag + n_proc]
        valid = st.epoch[rows] == it.epochs
        r = rows[valid]
        ce = c.c_eff[:n_proc, valid]
        emit = ce > 0
        st.emitted[r] += ce.sum(axis=0)
        st.host_seq[r] = c.seq_after[n_proc - 1, valid]
        first_gaps = T[0] - st.last_emit[r[emit[0]]]
        self.itl_values.append(first_gaps)
        self.itl_weights.append(np.ones(len(first_gaps)))
        if n_proc > 1:
            self.itl_values.append(np.diff(T))
            self.itl_weights.append(emit[1:].sum(axis=1).astype(np.float64))
        st.last_emit[r] = T[-1]
        fr = c.fin_round[valid]
        fin = (fr >= 0) & (fr < n_proc)
        if fin.any():
            self._finish(r[fin], T[fr[fin]])

    def _process(self, rec: Record, t: float) -> None:
        """Host processing of one round's results at time t."""
        st = self.slots
        valid = st.epoch[rec.slots] == rec.epochs
        slots = rec.slots[valid]
        if not slots.size:
            return
        ce = rec.c_eff[valid]
        st.emitted[slots] += ce
        if rec.host_seq is not None:
            st.host_seq[slots] = rec.host_seq[valid]
        emit = ce > 0
        first = rec.first[valid]
        rids = st.rid[slots]
        self.req.first_token_s[rids[first]] = t
        gap_rows = slots[emit & ~first]
        self.itl_values.append(t - st.last_emit[gap_rows])
        self.itl_weights.append(np.ones(len(gap_rows)))
        st.last_emit[slots[emit]] = t
        fin = rec.fin[valid]
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
