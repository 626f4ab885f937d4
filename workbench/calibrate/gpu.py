"""Timing of the reference engine's own pieces, for `python -m workbench calibrate` (torch).

Random weights of a real architecture (`random:<preset>`, timing does not depend on weight
values) run through the engine's own code: the target forward over the paged pool
(`Target.forward`, capturing the drafter's layers when q > 1, as verify does), the DFlash
draft block (`DFlashProposer.propose`: draft layers, LM head on B-1 rows, argmax), the LM
head plus argmax, the draft-KV injection (`DFlashProposer.prefill`: fc, hidden_norm and the
kv_materialize kernel), the prefill step (`Engine.prefill`, eager as in the engine), the
prepare_block and accept_bonus kernels, and whole `generate` runs for the host time per round
(CUDA-graph and eager paths). Decode-shaped pieces are captured in a CUDA graph (a fresh
`GraphCache` per point, as the engine replays them) and timed over `reps` replays with CUDA
events (median); the prefill on the host clock around a synchronized call. On the CPU the
same code runs eagerly on the host clock (the tests' quick mode).

Every timed shape is warm: a grid's shapes are all run once before its first timed point
(`warm_shapes`), and each point replays its own shape untimed for at least `WARM_S` before
the timed replays (`seconds`).
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch

from common.engine_options import EngineOptions
from reference import ops
from reference.cuda_graphs import GraphCache
from reference.device import Fence
from reference.engine import Engine, runtime
from reference.generate import generate
from reference.loaders import random_target
from reference.methods import BuildContext, MethodSpec, build
from reference.model import ForwardBatch
from reference.proposers import Round
from reference.verify import Sampling

WARM_S = 0.02  # untimed replays of a point's exact shape before its timed ones (seconds)


class Bench:
    """One model's target, drafters (one per block size, shared weights) and KV pool."""

    def __init__(self, preset: str, *, device: str, blocks: list[int], context_len: int,
                 max_requests: int, reps: int, budget_s: float, compile_layers: bool,
                 options: EngineOptions | None = None):
        self.start = time.perf_counter()
        self.deadline = self.start + budget_s
        self.dev = torch.device(device)
        self.cuda = self.dev.type == "cuda"
        dtype = torch.bfloat16 if self.cuda else torch.float32
        self.target = random_target(preset, device=self.dev, dtype=dtype, options=options)
        if self.cuda and compile_layers:
            self.target.enable_compile()
        base = build(MethodSpec.of("dflash", random=preset), self.target)
        self.own_block = base.block_size
        self.drafters = {b: build(MethodSpec.of("dflash", weights_of=base, block_size=b),
                                  self.target) for b in sorted({*blocks, base.block_size})}
        self.layer_ids = base.target_layer_ids
        self.rt = runtime(self.target, base.draft_kv, max_requests, context_len)
        self.pool = self.rt.pool
        for d in self.drafters.values():
            d.bind(self.target, self.pool, GraphCache(self.dev, enabled=False))
        self.reps = reps
        self.skipped: dict[str, int] = {}

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    def close(self) -> None:
        """Drop the KV pool and graphs now, before the next model allocates its own."""
        self.rt.pool.close()
        self.target.runtime = None
        if self.cuda:
            torch.cuda.empty_cache()

    def out_of_time(self, what: str) -> bool:
        if time.perf_counter() < self.deadline:
            return False
        self.skipped[what] = self.skipped.get(what, 0) + 1
        return True

    def max_length(self, n: int) -> int:
        """The most positions each of n rows can reserve (free slots, table width)."""
        return min(self.pool.free_slots // max(n, 1), self.pool.context_len)

    @contextlib.contextmanager
    def rows(self, n: int, length: int):
        """n request rows with slots for positions [0, length), or None if they do not fit."""
        if n * length > self.pool.free_slots or length > self.pool.context_len:
            yield None
            return
        rows = [self.pool.admit(length) for _ in range(n)]
        try:
            yield rows
        finally:
            for r in rows:
                self.pool.release(r)

    @property
    def in_time(self) -> bool:
        """Whether the budget has time left (a check that records no skipped point)."""
        return time.perf_counter() < self.deadline

    def warm_shapes(self, axes: dict, measure) -> None:
        """One untimed measure(rows, x, min(axes[2])) of every (requests, x) shape of a 3-axis
        grid before its first timed point: requests ascending, x (tokens per request, block)
        descending, so the GPU is busy before timing starts and each compiled specialization
        is first traced at its largest x, as in `validate run` (whose first call uses the
        largest block). torch.compile(dynamic=True) gives size-1 dimensions graphs of their
        own (n = 1, q = 1), each traced at the first shape it meets; without this warm-up the
        first rows timed (n = 1) read slower than larger ones, on a cold GPU and with
        specializations traced at a small x. Stops when the budget runs out
        (a warm-up loses no point, so nothing is counted as skipped)."""
        a0, a1, a2 = axes.values()
        y = min(a2)
        for n in a0:
            with self.rows(n, max(a1) + y) as rows:
                for x in sorted(a1, reverse=True):
                    if rows is None or not self.in_time:
                        break
                    measure(rows, x, y)

    def seconds(self, run) -> float:
        """Median device seconds of `reps` back-to-back calls of run() (one sync at the end),
        after untimed synchronized calls for at least WARM_S on the GPU (clocks up; 2 calls)."""
        t0, calls = time.perf_counter(), 0
        while calls < 2 or (self.cuda and time.perf_counter() - t0 < WARM_S):
            run()
            Fence(self.cuda, timing=False).record().synchronize()
            calls += 1
        fences = [Fence(self.cuda) for _ in range(self.reps + 1)]
        fences[0].record()
        for f in fences[1:]:
            run()
            f.record()
        fences[-1].synchronize()
        return statistics.median(b.seconds_since(a) for a, b in zip(fences, fences[1:]))

    def graphed(self, fn, *inputs: torch.Tensor) -> float:
        """Seconds of fn(*inputs) replayed from a CUDA graph (eager on the CPU)."""
        return self.seconds(self.replay(fn, *inputs))

    def replay(self, fn, *inputs: torch.Tensor):
        """A zero-argument replay of fn(*inputs) from its own CUDA graph (eager on the CPU),
        captured now (after its warm-up calls, with one replay); `seconds` warms further."""
        cache = GraphCache(self.dev)
        run = lambda: cache.run("calibration", fn, *inputs)  # noqa: E731
        run()
        return run

    def _tensor(self, values) -> torch.Tensor:
        return torch.as_tensor(values, dtype=torch.int64, device=self.dev)

    def target_forward(self, rows: list[int], q: int, kv: int) -> float:
        """Target forward of q new tokens per row on top of kv committed ones."""
        n, vocab = len(rows), self.target.config.vocab_size
        ids = torch.randint(0, vocab, (n, q), device=self.dev)
        positions = (kv + torch.arange(q, device=self.dev)).expand(n, q).contiguous()
        req_rows = self._tensor(rows)
        cache_loc = self.pool.req_to_token[req_rows, kv:kv + q].long()
        kv_lens = torch.full((n,), kv + q, dtype=torch.int64, device=self.dev)
        capture = self.layer_ids if q > 1 else ()
        pool = self.pool

        def fn(ids, positions, cache_loc, req_rows, kv_lens):
            batch = ForwardBatch(positions, cache_loc, req_rows, kv_lens)
            hidden, aux = self.target.forward(ids, batch, pool.req_to_token, pool.k, pool.v,
                                              capture=capture)
            return hidden if aux is None else (hidden, aux)

        return self.graphed(fn, ids, positions, cache_loc, req_rows, kv_lens)

    def _round(self, rows: list[int], kv: int, block: int, mask_id: int) -> Round:
        n = len(rows)
        verified = torch.randint(0, self.target.config.vocab_size, (n,), device=self.dev)
        prefix = torch.full((n,), kv, dtype=torch.int64, device=self.dev)
        req_rows = self._tensor(rows)
        block_ids, positions, cache_loc = ops.prepare_block(
            verified, prefix, req_rows, self.pool.req_to_token, block_size=block,
            mask_token_id=mask_id)
        return Round(verified, prefix, req_rows, block_ids, positions, cache_loc)

    def draft_block(self, rows: list[int], block: int, kv: int) -> float:
        """DFlash draft block: draft layers, LM head on B-1 rows and argmax."""
        prop = self.drafters[block]
        rnd = self._round(rows, kv, block, prop.mask_token_id)
        return self.graphed(lambda *t: prop.propose(Round(*t)).candidates, *rnd)

    def lm_head(self, n_rows: int) -> float:
        """LM head over n_rows final hidden states, then argmax (greedy sampling)."""
        h = torch.randn(n_rows, self.target.config.hidden_size, device=self.dev,
                        dtype=self.target.dtype)
        return self.graphed(lambda x: self.target.logits(x).argmax(dim=-1), h)

    def inject(self, tokens: int) -> float:
        """Draft-KV injection of `tokens` tokens (fc, hidden_norm, kv_materialize)."""
        if tokens + 1 > self.pool.num_slots:
            return float("nan")
        prop = self.drafters[self.own_block]
        width = len(self.layer_ids) * self.target.config.hidden_size
        aux = torch.randn(1, tokens, width, device=self.dev, dtype=self.target.dtype)
        positions = (torch.arange(tokens, device=self.dev)
                     % self.target.config.max_position).view(1, tokens)
        cache_loc = torch.arange(1, tokens + 1, device=self.dev).view(1, tokens)

        def fn(aux, positions, cache_loc):
            batch = ForwardBatch(positions, cache_loc, positions[:, 0], positions[:, 0])
            prop.prefill(None, batch, aux)

        return self.graphed(fn, aux, positions, cache_loc)

    def prefill(self, rows: list[int], q: int, kv: int) -> float:
        """Wall seconds of one `Engine.prefill` of q prompt tokens per row after kv ones
        (eager, host work included; the engine's TTFT step without injection)."""
        engine = Engine(self.target, None, self.rt, Sampling(0.0, 0, 1.0), 0)
        vocab = self.target.config.vocab_size
        chunks = torch.randint(0, vocab, (len(rows), q)).tolist()

        def run():
            if self.cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            engine.prefill(rows, chunks, [kv] * len(rows)).tolist()
            return time.perf_counter() - t0

        run()
        return statistics.median(run() for _ in range(max(2, self.reps // 2)))

    def kernels(self, rows: list[int], block: int) -> dict[str, float]:
        """prepare_block and accept_bonus, eager back-to-back (as the engine launches them)."""
        rnd = self._round(rows, 64, block, 0)
        cand = torch.randint(0, 8, (len(rows), block), device=self.dev)
        top1 = torch.randint(0, 8, (len(rows), block), device=self.dev)
        return {
            "prepare_block": self.seconds(lambda: ops.prepare_block(
                rnd.verified_id, rnd.prefix_lens, rnd.req_rows, self.pool.req_to_token,
                block_size=block, mask_token_id=0)),
            "accept_bonus": self.seconds(lambda: ops.accept_bonus(cand, top1,
                                                                   rnd.prefix_lens)),
        }

    def host_runs(self, n: int, prompt_len: int, new_tokens: int, eager: bool) -> dict:
        """AR and DFlash (oracle drafts, tau ~ 0.8 alpha) `generate` runs at n requests:
        per-round wall and device seconds (medians over rounds) and the mean context."""
        vocab = self.target.config.vocab_size
        prompts = torch.randint(0, vocab, (n, prompt_len)).tolist()
        saved, shadow = self.target.runtime.graphs, self.drafters[self.own_block]
        if eager:
            self.target.runtime.graphs = GraphCache(self.dev, enabled=False)
        try:
            ar = generate(self.target, prompts, max_new_tokens=new_tokens)
            oracle = build(MethodSpec.of("oracle", tau=min(4.0, self.own_block),
                                         block_size=self.own_block, shadow=True), self.target,
                           BuildContext(streams=ar.tokens, drafter=shadow))
            spec = generate(self.target, prompts, proposer=oracle, max_new_tokens=new_tokens)
        finally:
            self.target.runtime.graphs = saved
            shadow.bind(self.target, self.pool, GraphCache(self.dev, enabled=False))
        return {"none": _round_summary(ar, prompt_len, 1),
                "dflash": _round_summary(spec, prompt_len, self.own_block)}


def _round_summary(out, prompt_len: int, block: int) -> dict:
    """Medians over the rounds of a generate run that ran all its requests."""
    times = out.stats["round_times"]
    full = [r for r in times if r[0] == max(x[0] for x in times)]
    return {"n": full[0][0], "block": block, "rounds": len(full),
            "wall_s": statistics.median(r[1] for r in full),
            "device_s": statistics.median(sum(r[2:]) for r in full),
            "kv": prompt_len + len(out.tokens[0]) / 2, "tau": out.stats["tau"]}
