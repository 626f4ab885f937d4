"""The host's side of the serving loop: requests, admission, chunked prefill, decode planning.

Each planning pass (run under the plan stream) first returns the rows and KV slots of
requests whose finish the host has seen (after the `before_release` hook, which fences the
plan stream behind the step in flight: that step still reads those rows), then
admits waiting requests first come first served while the KV headroom allows: a request
claims prompt + max_new_tokens + 2B slots, so the reservations below can never fail and no
request is ever retracted. Then it picks the next step: a prefill step (chunks of admitted
prompts, at most `prefill_budget` tokens in all) if any prompt is unfinished, else a decode
round of every prefilled request.

The host's committed length `host_len` lags the device's by the results it has not read: one
round in overlap mode, none in sync mode. Planning round k therefore uses the bounds of
docs/sglang.md 5.2: the true prefix is at most `host_len + B` (planning
bound), and the row is reserved to `max(reserved, host_len + 2B)`, which covers the true
prefix plus this round's block. Results are applied in launch order; rows of a request the
host already saw finish (its extra round in overlap mode) are discarded, as in SGLang.

Every decode round commits at least one token, so a request finishes within max_new_tokens
- 1 rounds after its prefill, plus the discarded extra round in overlap mode: planning
one more raises at once (a round that commits nothing, or a broken stop or length check,
fails fast instead of decoding on).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from reference.kv_pool import KVPool
from reference.serve.workload import ServeRequest


@dataclass
class Live:
    """An admitted request as the host sees it (times are wall seconds of the run)."""

    req: ServeRequest
    row: int
    arrive_s: float
    admit_s: float
    prefilled: int = 0  # prompt tokens whose prefill is launched
    host_len: int = 0  # committed KV tokens the host knows of
    reserved: int = 0  # positions [0, reserved) of the row have slots
    tokens: list[int] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)
    rounds: int = 0  # decode rounds planned
    finished: bool = False
    released: bool = False
    discarded: int = 0  # result rows that arrived after the finish and were dropped
    first_token_s: float | None = None
    finish_s: float | None = None

    @property
    def decoding(self) -> bool:
        return self.prefilled == len(self.req.prompt) and not self.finished


class PrefillPlan(NamedTuple):
    """Chunk i extends lives[i] (row rows[i]) at positions starts[i]..; final: prompt done."""

    lives: list[Live]
    rows: list[int]
    chunks: list[list[int]]
    starts: list[int]
    final: list[bool]


class DecodePlan(NamedTuple):
    """A decode round of lives (rows); planning[i] = host_len + B bounds the true prefix."""

    lives: list[Live]
    rows: list[int]
    planning: list[int]


class Scheduler:
    """Admission, prefill chunking, decode planning and result bookkeeping over one pool.

    Args:
        pool: the KV pool (its allocator is only touched from `plan`).
        block: B, tokens per round (1 for plain decoding).
        max_running: most admitted requests at a time (the decode batch size cap).
        prefill_budget: most prompt tokens per prefill step.
        stop_token_ids: a request finishes after the first of these it emits.
    """

    def __init__(self, pool: KVPool, block: int, *, max_running: int, prefill_budget: int,
                 stop_token_ids=()):
        if prefill_budget < 1 or max_running < 1:
            raise ValueError("prefill_budget and max_running must be >= 1")
        self.pool, self.block = pool, block
        self.max_running, self.prefill_budget = max_running, prefill_budget
        self.stop = set(stop_token_ids)
        self.waiting: deque[tuple[ServeRequest, float]] = deque()
        self.live: list[Live] = []
        self.done: list[Live] = []
        self.claimed = 0

    def claim(self, req: ServeRequest) -> int:
        """Slots a request may ever hold: prompt, new tokens, and 2B of look-ahead."""
        return len(req.prompt) + req.max_new_tokens + 2 * self.block

    def arrive(self, reqs: list[ServeRequest], now: float) -> None:
        self.waiting.extend((r, now) for r in reqs)

    @property
    def empty(self) -> bool:
        return not self.waiting and not self.live

    def plan(self, now: float, before_release: Callable[[], None] | None = None
             ) -> tuple[PrefillPlan | DecodePlan | None, list[Live]]:
        """Release finished rows (calling `before_release` first if there are any), admit,
        and pick the next step; returns it (None when nothing can run) and the newly
        admitted requests."""
        self._release(before_release)
        admitted = self._admit(now)
        return self._prefill() or self._decode(), admitted

    def _release(self, before: Callable[[], None] | None = None) -> None:
        finished = [lv for lv in self.live if lv.finished]
        if finished and before is not None:
            before()
        for lv in finished:
            self.pool.release(lv.row)
            self.claimed -= self.claim(lv.req)
            lv.released = True
            self.live.remove(lv)
            self.done.append(lv)

    def _admit(self, now: float) -> list[Live]:
        admitted = []
        capacity = self.pool.num_slots - 1
        while self.waiting and len(self.live) < self.max_running:
            req, arrive_s = self.waiting[0]
            if self.claimed + self.claim(req) > capacity:
                break
            row = self.pool.admit(len(req.prompt) + 2 * self.block)
            self.waiting.popleft()
            self.claimed += self.claim(req)
            lv = Live(req, row, arrive_s, now, reserved=len(req.prompt) + 2 * self.block)
            self.live.append(lv)
            admitted.append(lv)
        return admitted

    def _prefill(self) -> PrefillPlan | None:
        plan = PrefillPlan([], [], [], [], [])
        budget = self.prefill_budget
        for lv in self.live:
            prompt = lv.req.prompt
            if budget == 0:
                break
            if lv.prefilled == len(prompt):
                continue
            n = min(len(prompt) - lv.prefilled, budget)
            plan.lives.append(lv)
            plan.rows.append(lv.row)
            plan.chunks.append(list(prompt[lv.prefilled: lv.prefilled + n]))
            plan.starts.append(lv.prefilled)
            lv.prefilled += n
            budget -= n
            plan.final.append(lv.prefilled == len(prompt))
            if plan.final[-1]:
                lv.host_len = len(prompt)  # the prompt's KV; the first token is the anchor
        return plan if plan.lives else None

    def _decode(self) -> DecodePlan | None:
        lives = [lv for lv in self.live if lv.decoding]
        if not lives:
            return None
        block = self.block
        for lv in lives:
            if lv.rounds >= lv.req.max_new_tokens:
                raise RuntimeError(
                    f"request {lv.req.rid} would get decode round {lv.rounds + 1} with "
                    f"max_new_tokens = {lv.req.max_new_tokens}: a round committed nothing, "
                    "or its stop or length check never fired")
            lv.rounds += 1
            lv.reserved = max(lv.reserved, lv.host_len + 2 * block)
        self.pool.reserve_many([lv.row for lv in lives], [lv.reserved for lv in lives])
        return DecodePlan(lives, [lv.row for lv in lives], [lv.host_len + block for lv in lives])

    def apply(self, plan: PrefillPlan | DecodePlan, rows: list[list[int]], now: float
              ) -> list[Live]:
        """Apply one step's results, rows[i] = [commit_len, tokens...] for plan.lives[i]
        (commit_len 0 for a prefill chunk that does not end its prompt, else 1). Returns
        the requests seen finishing now; their rows are released at the next plan."""
        finished = []
        decode = isinstance(plan, DecodePlan)
        for lv, (n, *toks) in zip(plan.lives, rows):
            if lv.finished:
                lv.discarded += 1  # launched before the host saw the finish
                continue
            if n == 0:
                continue
            if decode:
                lv.commits.append(n)
                lv.host_len += n
            elif lv.first_token_s is None:
                lv.first_token_s = now
            for tok in toks[:n]:
                lv.tokens.append(tok)
                if tok in self.stop or len(lv.tokens) >= lv.req.max_new_tokens:
                    lv.finished, lv.finish_s = True, now
                    finished.append(lv)
                    break
        return finished

    def release_all(self) -> None:
        """Give every row back (after an error, or to end a run early)."""
        for lv in self.live:
            lv.finished = True
        self._release()
        self.waiting.clear()
