"""The continuous-batching serving loop, in `sync` or `overlap` mode.

Every iteration plans one step on the host, launches it on the device, and reads results:

    sync:    plan(k) -> launch(k) -> wait(k) -> process(k)
    overlap: plan(k) -> launch(k) -> wait(k-1) -> process(k-1)

so in overlap mode the host plans and launches step k while step k-1 is still running, and
the device goes from one step to the next without waiting for the host. What makes that
safe (docs/sglang.md 5), per step on the device:

- plan stream: release finished rows, admit and reserve KV slots (table writes), upload the
  batch's rows; record plan-done. Releasing zeroes table rows the step in flight still reads
  (its discarded extra round), so a plan that releases first waits for that step's
  verify-done; a plan that does not is not fenced, and its work runs while the step in
  flight runs, off the path between two rounds. That is safe: reservations write table
  entries beyond every in-flight block, a reused slot or row comes from an earlier (fenced)
  release, and every reader and writer of KV and the FutureMap is on the forward stream.
- forward stream: wait plan-done; gather prefix_lens and anchors from the FutureMap; run the
  round; publish new_seq_lens and bonus to the FutureMap (publish fence); inject KV; record
  verify-done.
- copy stream: wait the publish fence; copy (commit_len, tokens) to pinned host memory;
  record copy-done, on which the host waits when it processes the step.

In sync mode nothing overlaps: planning, the step and the read of its results all run on
the forward stream, and the host reads each step's results straight from the device.

The host's committed lengths lag the device's by one round, hence the planning (host + B)
and reservation (host + 2B) bounds in reference/serve/scheduler.py; a request seen finishing
in step k-1 has already been launched in step k, whose output for it is discarded. On the
CPU every fence is already passed when it is recorded: the same code runs synchronously.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass

import torch

from common.buckets import bucket, round_up
from reference.device import Fence, Streams, to_device
from reference.engine import Clock, DecodeBatch, Engine, StepOutput, runtime
from reference.model import Target
from reference.proposers import Proposer
from reference.serve.relay import DirectResult, FutureMap, HostResult, ResultCopy
from reference.serve.scheduler import DecodePlan, Live, PrefillPlan, Scheduler
from reference.serve.timeline import Timeline
from reference.serve.workload import OpenLoop, ServeRequest
from reference.verify import Sampling

MODES = ("sync", "overlap")


@dataclass(frozen=True)
class ServeConfig:
    """mode: sync or overlap; clock: 'wall' (seconds) or 'steps' (the iteration count, for
    deterministic tests); check: assert slot ownership and the lag bounds every step (reads
    the device, so it syncs on CUDA)."""

    mode: str = "overlap"
    max_running: int = 64
    prefill_budget: int = 8192
    stop_token_ids: tuple[int, ...] = ()
    sampling: Sampling = Sampling()
    seed: int = 0
    clock: str = "wall"
    check: bool = False


@dataclass
class Step:
    plan: PrefillPlan | DecodePlan
    result: HostResult | DirectResult
    done: Fence  # verify-done


@dataclass
class ServeResult:
    """requests: one finished `Live` per request, by rid; stats: see `Server.stats`."""

    requests: list[Live]
    stats: dict
    timeline: Timeline

    @property
    def tokens(self) -> list[list[int]]:
        return [lv.tokens for lv in self.requests]


class Server:
    """One serving run of `target` (and `proposer`) over the requests of a workload."""

    def __init__(self, target: Target, proposer: Proposer | None, config: ServeConfig,
                 max_context: int):
        if config.mode not in MODES or config.clock not in ("wall", "steps"):
            raise ValueError(f"mode must be one of {MODES} and clock 'wall' or 'steps'")
        self.target, self.proposer, self.cfg = target, proposer, config
        self.block = proposer.block_size if proposer else 1
        self.device = target.device
        self.max_context = max_context
        self.rt = rt = runtime(target, proposer.draft_kv if proposer else None,
                               config.max_running, round_up(max_context + 2 * self.block, 64))
        self.pool = rt.pool
        self.engine = Engine(target, proposer, rt, config.sampling, config.seed)
        self.streams = Streams(self.device, side_streams=config.mode == "overlap")
        self.relay = FutureMap(self.pool.req_to_token.shape[0], self.device)
        self.copies = (ResultCopy(self.streams, self.device, bucket(config.max_running),
                                  1 + self.block) if config.mode == "overlap" else None)
        self.sched = Scheduler(self.pool, self.block, max_running=config.max_running,
                               prefill_budget=config.prefill_budget,
                               stop_token_ids=config.stop_token_ids)
        self.last_done: Fence | None = None  # verify-done of the newest launched step
        self.plan_done: Fence | None = None
        self.max_lag = self.fenced_plans = 0

    def warm_up(self, max_bs: int, prompt_len: int = 1) -> None:
        """Serve, per batch bucket up to min(max_bs, max_running), that many requests of
        `prompt_len` tokens (at most max_context - 2) and 2 new tokens through `run` itself:
        the timed run's graph keys, prefill, relay, plan-stream, copy and process paths, in
        this mode, on these streams. Stop tokens are off meanwhile (every request decodes).
        The target's Triton GEMV is tuned first at every row count a prefill chunk can have.
        Then the engine is rebuilt (sampler and proposer reseeded: results do not depend on
        the warm-up) and a full garbage collection runs, so none is due in the timed run."""
        self.target.warm_up_gemv()
        top, stop = min(max_bs, self.cfg.max_running), self.sched.stop
        prompt = (1,) * max(1, min(prompt_len, self.max_context - 2))
        self.sched.stop = set()
        try:
            for bs in sorted({bucket(b) for b in range(1, top + 1)}):
                # rid 0 for all: a valid index into an oracle proposer's streams
                self.run(OpenLoop([ServeRequest(0, prompt, 2) for _ in range(min(bs, top))]))
        finally:
            self.sched.stop = stop
        self.engine = Engine(self.target, self.proposer, self.rt, self.cfg.sampling,
                             self.cfg.seed)
        gc.collect()

    def run(self, workload: OpenLoop) -> ServeResult:
        for req in workload.requests:
            if self.sched.claim(req) > self.pool.num_slots - 1:
                raise ValueError(f"request {req.rid} needs {self.sched.claim(req)} KV slots, "
                                 f"the pool has {self.pool.num_slots - 1}")
        self.sched.done.clear()  # this run's requests only (after a warm-up or earlier run)
        self.max_lag = self.fenced_plans = 0
        self.last_done = self.prefilled_s = None
        self.step_walls: list[tuple[str, int, float]] = []  # (kind, bs, s since last process)
        self.timeline = Timeline(self.device)
        self._last_process_s, self._rows_cache = 0.0, None
        try:
            with torch.inference_mode():
                self._loop(workload)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        finally:
            self.sched.release_all()
        lives = sorted(self.sched.done, key=lambda lv: lv.req.rid)
        return ServeResult(lives, self.stats(lives), self.timeline)

    def _now(self, steps: int) -> float:
        if self.cfg.clock == "steps":
            return float(steps)
        return time.perf_counter() - self.timeline.t0

    def _loop(self, workload: OpenLoop) -> None:
        tl, steps, pending = self.timeline, 0, None
        while True:
            self.sched.arrive(workload.due(self._now(steps)), self._wall())
            with tl.span("plan"):
                plan, rows = self._plan()
            if plan is None:
                if pending is not None:
                    self._process(pending, workload, steps)
                    pending = None
                    continue
                nxt = workload.next_arrival()
                if nxt is None and self.sched.empty:
                    return
                if nxt is None:
                    raise RuntimeError("requests are waiting but none can be admitted")
                if self.cfg.clock == "steps":
                    steps = max(steps + 1, math.ceil(nxt))
                else:
                    time.sleep(max(0.0, nxt - self._now(steps)))
                continue
            with tl.span("launch", kind=type(plan).__name__, bs=len(plan.lives)):
                step = self._launch(plan, rows)
            steps += 1
            if self.cfg.mode == "sync":
                self._process(step, workload, steps)
            else:
                if pending is not None:
                    self._process(pending, workload, steps)
                pending = step

    def _wall(self) -> float:
        return time.perf_counter() - self.timeline.t0

    def _plan(self) -> tuple[PrefillPlan | DecodePlan | None,
                             tuple[torch.Tensor, torch.Tensor] | None]:
        """Host planning plus the fenced allocation work on the plan stream."""
        s = self.streams
        with s.on(s.plan):
            plan, admitted = self.sched.plan(self._wall(), self._fence_plan)
            if admitted and self.proposer is not None:
                self.proposer.start([lv.row for lv in admitted], [lv.req.rid for lv in admitted],
                                    [len(lv.req.prompt) for lv in admitted])
            rows = None
            if isinstance(plan, DecodePlan):
                rows = self._rows(plan.rows)
            self.plan_done = s.fence(s.plan)
        if self.cfg.check:
            self._check(plan)
        return plan, rows

    def _rows(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows padded to a bucket with row 0, valid = rows != 0), both (bs,) i64 on the
        device, uploaded only when the decode batch's rows change (on the plan stream)."""
        key = tuple(rows)
        if self._rows_cache is None or self._rows_cache[0] != key:
            padded = to_device(rows + [0] * (bucket(len(rows)) - len(rows)), self.device)
            self._rows_cache = (key, padded, (padded != 0).long())
        return self._rows_cache[1], self._rows_cache[2]

    def _fence_plan(self) -> None:
        """The plan stream waits (on the device) for the newest launched step to finish."""
        if self.last_done is not None:
            self.last_done.wait(self.streams.plan)
            self.fenced_plans += 1

    def _launch(self, plan: PrefillPlan | DecodePlan,
                rows: tuple[torch.Tensor, torch.Tensor] | None) -> Step:
        """Enqueue the step on the forward stream and its result copy on the copy stream."""
        s, dev = self.streams, self.device
        self.plan_done.wait(s.forward)
        clock = Clock(dev)
        clock.mark()
        ready = []  # (packed results (n, w) i64, publish fence), set by the publish hook
        if isinstance(plan, DecodePlan):
            rows, valid = rows
            s.hand_over(rows, s.forward)
            s.hand_over(valid, s.forward)
            verified_id, prefix_lens = self.relay.resolve(rows)

            def publish(out: StepOutput) -> None:
                self.relay.publish(rows, out.new_seq_lens, out.bonus)
                packed = torch.cat([out.commit_lens[:, None].long(), out.out_tokens], dim=1)
                ready.append((packed[: len(plan.rows)], s.fence(timing=True)))

            self.engine.round(DecodeBatch(verified_id, prefix_lens, rows, valid,
                                          len(plan.rows)), clock, publish)
        else:
            final = to_device(plan.final, dev)

            def publish(first: torch.Tensor) -> None:
                done = [(i, lv.row, len(lv.req.prompt))
                        for i, (lv, f) in enumerate(zip(plan.lives, plan.final)) if f]
                if done:
                    where, rows_f, lens = to_device(done, dev).unbind(1)
                    self.relay.publish(rows_f, lens, first[where])
                ready.append((torch.stack([final, first], dim=1), s.fence(timing=True)))

            self.engine.prefill(plan.rows, plan.chunks, plan.starts, publish)
            clock.mark()
        self.last_done = done = s.fence()  # verify-done: the step, KV injection included
        result = (self.copies.start(*ready[0]) if self.cfg.mode == "overlap"
                  else DirectResult(*ready[0]))
        kind = "decode" if isinstance(plan, DecodePlan) else "prefill"
        self.timeline.step(kind, len(plan.lives), clock, result)
        return Step(plan, result, done)

    def _process(self, step: Step, workload: OpenLoop, steps: int) -> None:
        with self.timeline.span("wait"):
            rows = step.result.wait()  # sync: the read follows the whole step on its stream
        with self.timeline.span("process", bs=len(rows)):
            for lv in self.sched.apply(step.plan, rows, self._wall()):
                workload.on_finish(lv.req, self._now(steps))
        now = self._wall()
        kind = "decode" if isinstance(step.plan, DecodePlan) else "prefill"
        if kind == "prefill":
            self.prefilled_s = now
        self.step_walls.append((kind, len(rows), now - self._last_process_s))
        self._last_process_s = now

    def _check(self, plan) -> None:
        """Slot ownership, and the lag bounds host <= true <= host + B, reserved >= true + B."""
        self.pool.check()
        live_rows = [lv.row for lv in self.sched.live]
        assert len(set(live_rows)) == len(live_rows), "a row is owned by two live requests"
        if not isinstance(plan, DecodePlan):
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        lag_max = self.block if self.cfg.mode == "overlap" else 0
        for lv, true in zip(plan.lives, self.relay.peek(plan.rows)):
            assert lv.host_len <= true <= lv.host_len + lag_max, (lv.req.rid, lv.host_len, true)
            assert self.pool.reserved(lv.row) >= true + self.block, (lv.req.rid, true)
            self.max_lag = max(self.max_lag, true - lv.host_len)

    def stats(self, lives: list[Live]) -> dict:
        """Throughput, latency, rounds and the timeline's device/host summary."""
        tokens = sum(len(lv.tokens) for lv in lives)
        ends = [lv.finish_s for lv in lives if lv.finish_s is not None]
        wall = max(ends) if ends else 0.0
        commits = [c for lv in lives for c in lv.commits]
        tpots = sorted((lv.finish_s - lv.first_token_s) / (len(lv.tokens) - 1) for lv in lives
                       if len(lv.tokens) > 1)
        kinds = [k for k, *_ in self.timeline.steps]
        return {
            "mode": self.cfg.mode, "requests": len(lives), "output_tokens": tokens,
            "wall_s": wall, "throughput_tok_s": tokens / wall if wall > 0 else 0.0,
            "tpot_s": sum(tpots) / max(len(tpots), 1),
            "tpot_p99_s": tpots[math.ceil(0.99 * len(tpots)) - 1] if tpots else 0.0,
            "ttft_s": sum(lv.first_token_s - lv.arrive_s for lv in lives) / max(len(lives), 1),
            "decode_rounds": kinds.count("decode"), "prefill_steps": kinds.count("prefill"),
            "tau": sum(commits) / max(len(commits), 1),
            "discarded_rows": sum(lv.discarded for lv in lives),
            "max_lag": self.max_lag if self.cfg.check else None,
            "fenced_plans": self.fenced_plans,
            "prefilled_s": self.prefilled_s,
            **self.timeline.summary(),
            **(self.proposer.stats() if self.proposer is not None else {}),
        }


def serve(target: Target, workload: OpenLoop, *, proposer: Proposer | None = None,
          config: ServeConfig = ServeConfig()) -> ServeResult:
    """Serve every request of `workload`; returns per-request outputs, stats and timeline."""
    context = max(len(r.prompt) + r.max_new_tokens for r in workload.requests)
    return Server(target, proposer, config, context).run(workload)
