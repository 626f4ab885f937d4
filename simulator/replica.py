"""One serving replica: a GPU and a host, driven by one simpy process (`serve_loop`).

Each loop iteration is an event: a prefill round (SGLang gives new prefills priority; chunked
to `chunked_prefill_size` tokens), or a stretch of decode rounds with a fixed batch (see
`stretch.py`), or, in overlap mode, the processing of the last in-flight round. A stretch is
cut short when a request arrives that could be admitted: the arrival interrupts the process
and the stretch ends at the first round boundary after it.

Sync mode (Spec V1): host plan -> GPU round -> copy -> host processing, in sequence.
Overlap mode (Spec V2): iteration k plans and launches round k, then processes round k-1, so
the host's committed lengths lag one round; KV is reserved to committed + R*B
(`engine.kv_reserve_blocks` = R, 2 by default for overlap; B is the method's `max_query`,
the block size but for ISD's 2N-1) and finished requests ride one
wasted round. Round results (tokens, first tokens, finishes) take effect when the host
processes them; see `rounds.py` for how records are applied.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import simpy

from simulator.acceptance import AcceptanceModel
from simulator.costs import CostModel
from simulator.engine_profiles import spec_path_s
from simulator.methods import SpecMethod
from simulator.params import ConfigError, SimConfig
from simulator.rounds import Record, RoundsMixin
from simulator.slots import SlotTable
from simulator.stretch import Commits, plan_commits, timeline_overlap, timeline_sync
from simulator.workload import Requests


@dataclass(slots=True)
class Iteration:
    """A planned iteration (`kind` prefill, decode or pending): H[k] is when the host starts
    iteration k's planning, H[-1] when the whole iteration is over; GPU start/end per round;
    host seconds per plan and per processed round; what to apply at the end (the prefill's
    `record`, or a decode stretch's rows, their epochs, verify lengths and commits)."""

    kind: str
    H: np.ndarray
    start: np.ndarray
    end: np.ndarray
    gpu_s: np.ndarray
    plan_s: float
    proc_s: float
    record: Record | None = None
    rows: np.ndarray | None = None
    epochs: np.ndarray | None = None
    q: np.ndarray | None = None
    commits: Commits | None = None
    releases: int = 0

    @property
    def wake(self) -> float:
        return float(self.H[-1])

    def truncate(self, t: float) -> None:
        """Keep the rounds whose iteration starts before t (at least one)."""
        cut = max(1, int(np.searchsorted(self.H, t, side="left")))
        if cut >= len(self.gpu_s):
            return
        self.H, self.start, self.end = self.H[: cut + 1], self.start[:cut], self.end[:cut]
        self.gpu_s = self.gpu_s[:cut]
        self.commits = self.commits.cut(cut)
        if self.q is not None and self.q.ndim == 2:
            self.q = self.q[:cut]


class Replica(RoundsMixin):
    """A replica's scheduler, KV pool and timelines."""

    def __init__(self, env: simpy.Environment, index: int, cfg: SimConfig, cost: CostModel,
                 method: SpecMethod, acceptance: AcceptanceModel, requests: Requests,
                 capacity_tokens: int,
                 on_finish: Callable[[np.ndarray, np.ndarray], None]):
        self.env, self.index, self.cfg = env, index, cfg
        self.cost, self.method, self.acceptance, self.req = cost, method, acceptance, requests
        self.on_finish = on_finish
        e = cfg.engine
        self.slots = SlotTable(e.max_running_requests, capacity_tokens)
        self.lag = 1 if e.mode == "overlap" else 0
        self.reserve_tokens = e.kv_reserve_blocks * method.max_query
        self.waiting: deque[int] = deque()
        self.resume: dict[int, tuple[int, float]] = {}
        self.pending: Record | None = None
        self.gpu_free = -np.inf
        self.init_stats(method.block_size)
        self._wake: simpy.Event | None = None
        self._interruptible = False
        self._inflight: Iteration | None = None
        self.process = env.process(self.serve_loop())

    def kv_used_at(self, t: float) -> int:
        """KV slots in use at time t, counting the rounds of the stretch in flight."""
        used = self.slots.kv_used
        it = self._inflight
        if it is None or it.kind != "decode":
            return used
        c = it.commits
        k = min(max(int(it.H.searchsorted(t, side="right")) - 1, 0), c.length - 1)
        grow = c.host_view(k) + c.reserve - c.res0
        return used + int(grow[grow > 0].sum())

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + self.slots.n_active

    def enqueue(self, rid: int) -> None:
        """A request routed here (at env.now)."""
        self.waiting.append(rid)
        if self._wake is not None:
            self._wake.succeed()
            self._wake = None
        elif self._interruptible and self.slots.n_active < len(self.slots.active):
            self._interruptible = False
            self.process.interrupt()

    def serve_loop(self) -> Generator[simpy.Event, None, None]:
        """The engine loop: plan, wait until the iteration is over, apply its results."""
        env = self.env
        while True:
            now = env.now
            it = self._plan_prefill(now) or self._plan_decode(now) or self._plan_pending(now)
            if it is None:
                self.gpu_free = -np.inf
                self._wake = env.event()
                yield self._wake
                continue
            self._interruptible = it.kind == "decode"
            self._inflight = it
            try:
                yield env.timeout(it.wake - now)
            except simpy.Interrupt:
                it.truncate(env.now)
                yield env.timeout(it.wake - env.now)
            self._interruptible = False
            self._inflight = None
            self.commit(it)

    def _timeline(self, now: float, gpu_s: np.ndarray, n: int, launch_s: float = 0.0,
                  method_plan_s: float = 0.0):
        """Host and GPU times of the next rounds; launch_s: a one-round (prefill) step's
        host launch, which its GPU work cannot outrun (`timeline_overlap`); method_plan_s:
        the method's own host work per decode round (`SpecMethod.host_plan_s`)."""
        plan_s, proc_s = self.cost.host_plan_s(n) + method_plan_s, self.cost.host_process_s(n)
        copy_s = self.cost.copy_s()
        if self.lag:
            pend = self.pending.proc_s if self.pending is not None else None
            H, s, e = timeline_overlap(now, plan_s, gpu_s, copy_s, proc_s, self.gpu_free, pend,
                                       launch_s)
        else:
            H, s, e = timeline_sync(now, plan_s, np.maximum(gpu_s, launch_s), copy_s, proc_s)
        return H, s, e, plan_s, proc_s

    def _plan_prefill(self, now: float) -> Iteration | None:
        rows_l, chunks, new = self._select_prefill()
        if not rows_l:
            return None
        st = self.slots
        rows = np.array(rows_l)
        q = np.array(chunks, dtype=np.int64)
        kv = st.prefilled[rows]
        seq = kv + q  # during prefill, committed KV = prefilled prompt tokens = reserved
        st.prefilled[rows] = st.seq[rows] = st.host_seq[rows] = st.reserved[rows] = seq
        st.kv_free -= sum(chunks)
        if new:
            slots = np.array(new)
            self.acceptance.admit(slots, st.rid[slots])
        done = rows[seq == st.need[rows]]
        if done.size:
            st.ready[done] = True
            st.gen[done] += 1
            for slot in done.tolist():
                st.prefilling.remove(slot)
        gpu = np.array([self.method.prefill_gpu_s(self.cost, q, kv)])
        H, s, e, plan_s, proc_s = self._timeline(now, gpu, len(rows),
                                                 self.cfg.engine.prefill_launch_s)
        rec = Record(done, st.epoch[done], np.ones(len(done), dtype=np.int64),
                     st.emitted[done] == 0, st.gen[done] >= st.out[done], None, proc_s,
                     st.releases)
        return Iteration("prefill", H, s, e, gpu, plan_s, proc_s, record=rec)

    def _select_prefill(self) -> tuple[list, list, list]:
        """Rows and chunk sizes of the next prefill batch (continuing chunks first, then
        FCFS admissions under the token budget, the slot limit and the KV headroom)."""
        st, e, r = self.slots, self.cfg.engine, self.req
        budget = e.chunked_prefill_size
        rows, chunks, new = [], [], []
        free = st.kv_free
        for slot in st.prefilling:
            c = min(int(st.need[slot] - st.prefilled[slot]), budget, free)
            if c <= 0:
                break
            rows.append(slot)
            chunks.append(c)
            budget -= c
            free -= c
        if not self.waiting or budget <= 0 or not st.free_slots:
            return rows, chunks, new
        max_new = self.cfg.workload.max_new_tokens
        emitted_sum = int(st.emitted[st.active].sum())
        future = e.new_token_ratio * (max_new * st.n_active - emitted_sum)
        future += sum(int(st.need[i] - st.prefilled[i]) for i in st.prefilling)
        # the reservation every admitted request takes at its next round (counted when it
        # was admitted, not yet taken from the pool)
        future += int(np.maximum(st.host_seq + self.reserve_tokens - st.reserved, 0)[
            st.active].sum())
        headroom = st.kv_free - future
        while self.waiting and budget > 0 and st.free_slots:
            rid = self.waiting[0]
            emitted, last = self.resume.get(rid, (0, 0.0))
            need = int(r.prompt_tokens[rid]) + emitted
            est = need + e.new_token_ratio * (max_new - emitted) + self.reserve_tokens
            if est > headroom:
                if not rows and st.n_active == 0 and self.pending is None:
                    raise ConfigError(
                        f"replica {self.index}: request {rid} needs ~{est:.0f} KV tokens "
                        f"(prompt + new_token_ratio * max_new_tokens + reserve) but the KV "
                        f"pool holds {st.capacity}: shorten the prompts "
                        "(workload.prompt_tokens_mean) or raise engine.mem_fraction_static"
                    )
                break
            headroom -= est
            self.waiting.popleft()
            self.resume.pop(rid, None)
            slot = st.occupy(rid, int(r.prompt_tokens[rid]), int(r.output_tokens[rid]),
                             emitted, last)
            c = min(need, budget)
            rows.append(slot)
            chunks.append(c)
            new.append(slot)
            budget -= c
        return rows, chunks, new

    def _plan_decode(self, now: float) -> Iteration | None:
        st = self.slots
        rows = self._retract_if_needed(st.decode_rows())
        if not rows.size:
            return None
        gen, out = st.gen[rows], st.out[rows]
        q, c_raw = self.method.plan_rounds(self.cost, self.acceptance, rows, st.seq[rows],
                                           self._stretch_rounds(rows, out - gen))
        commits = plan_commits(c_raw, gen, out, st.seq[rows], st.host_seq[rows],
                               st.reserved[rows], st.kv_free, self.reserve_tokens, self.lag)
        if q.ndim == 2:  # verify lengths per round (DSpark): keep the stretch's rounds
            q = q[:commits.length]
        spec_gpu, spec_host = spec_path_s(self.cfg, q, len(rows))
        gpu = np.atleast_1d(self.method.decode_gpu_s(self.cost, q, commits.kv) + spec_gpu)
        H, s, e, plan_s, proc_s = self._timeline(
            now, gpu, len(rows), method_plan_s=self.method.host_plan_s(len(rows)) + spec_host)
        return Iteration("decode", H, s, e, gpu, plan_s, proc_s, rows=rows,
                         epochs=st.epoch[rows], q=q, commits=commits, releases=st.releases)

    def _stretch_rounds(self, rows: np.ndarray, rem: np.ndarray) -> int:
        """Rounds to sample: a little beyond the expected first finish."""
        guess = float((rem / self.acceptance.expected[rows]).min())
        if guess <= 0:
            return 1
        return int(min(self.cfg.engine.max_stretch_rounds, 1.25 * guess + 2 + self.lag))

    def _retract_if_needed(self, rows: np.ndarray) -> np.ndarray:
        """Preempt requests (back to the waiting queue) until the next round's KV fits."""
        st = self.slots
        if st.kv_free >= len(rows) * self.reserve_tokens:  # reserved >= host_seq always
            return rows
        res = st.reserved[rows]
        need = np.maximum(res, st.host_seq[rows] + self.reserve_tokens)
        excess = int((need - res).sum()) - st.kv_free
        if excess <= 0:
            return rows
        alive = st.gen[rows] < st.out[rows]
        cand = rows[alive]
        victims = st.victims(cand, excess, need[alive], self.req.prompt_tokens[st.rid[cand]])
        if not victims.size:
            raise RuntimeError(
                f"replica {self.index}: KV pool of {st.capacity} tokens cannot hold the "
                "running requests' next round; raise engine.mem_fraction_static or lower "
                "workload lengths"
            )
        self.retract(victims)
        return np.setdiff1d(rows, victims)

    def _plan_pending(self, now: float) -> Iteration | None:
        if self.pending is None:
            return None
        t = max(now, self.gpu_free + self.cost.copy_s()) + self.pending.proc_s
        H = np.array([now, t])
        none = np.empty(0)
        return Iteration("pending", H, none, none, none, 0.0, 0.0)
