"""The device work of one engine step, shared by `generate` and the serving loop.

`Engine.prefill` extends request rows by ragged prompt chunks (a whole prompt, or one chunk
of a chunked prefill) and samples the token after each chunk. `Engine.round` runs one
round for a padded batch (docs/architecture.md, "Hot path"), the stages of
reference/proposers.py: propose (prepare_block, then the method's draft: tokens, or a tree
with its ancestor mask) -> verify (the engine's one target forward, capturing the method's
layers) -> accept (the method's rule: greedy, sampling, tree path) -> publish -> commit
(the method's state, KV injection, slot compaction). The method groups stages into CUDA
graphs (`Proposer.spans`). Plain decoding (proposer None) is the same round with B = 1 and
no draft (`Plain`). Neither touches the host's view of the requests, and neither waits for
the device: callers decide when to read the results (generate at once, the overlap serving
loop one step later). `runtime` owns the target's KV pool and CUDA graphs across calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from reference import ops
from reference.cuda_graphs import GraphCache
from reference.device import Fence, to_device
from reference.kv_pool import KVPool, KVShape
from reference.model import ForwardBatch, Target
from reference.proposers import (
    STAGES,
    Plain,
    Proposal,
    Proposer,
    Round,
    StepOutput,
    Verified,
)
from reference.verify import Sampling, sample

MEM_FRACTION = 0.85  # of device memory, for weights plus KV pool (SGLang's mem_fraction_static)
MIN_ROWS = 256  # request rows of a CUDA pool
PHASES = ("draft", "verify", "accept", "inject")


@dataclass
class Runtime:
    pool: KVPool
    graphs: GraphCache


def runtime(target: Target, draft: KVShape | None, max_requests: int,
            context_len: int) -> Runtime:
    """The target's pool and graphs, rebuilt only when they cannot hold this batch."""
    rt = target.runtime
    if rt is not None and rt.pool.can_hold(draft, max_requests, context_len):
        return rt
    if target.device.type == "cuda":  # rows are cheap; rebuilding loses the CUDA graphs
        max_requests = max(max_requests, MIN_ROWS)
    if rt is not None:
        rt.pool.close()
    target.runtime = rt = None
    shape = KVShape(target.config.num_layers, target.config.num_kv_heads, target.config.head_dim)
    if target.device.type == "cuda":
        torch.cuda.empty_cache()
        pool = KVPool.from_budget(MEM_FRACTION, max_requests, context_len, shape, draft,
                                  target.dtype, target.device)
    else:
        pool = KVPool(max_requests * context_len + 1, max_requests, context_len, shape, draft,
                      target.dtype, target.device)
    target.runtime = Runtime(pool, GraphCache(target.device))
    return target.runtime


class Clock:
    """Marks phase boundaries on the device timeline (CUDA events) or the host clock, and
    when the host reached each mark: a phase whose host interval is as long as its device
    interval was launch-bound (the device waited for the host inside it)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[Fence] = []
        self.host: list[float] = []

    def mark(self) -> None:
        self.marks.append(Fence(self.cuda).record())
        self.host.append(time.perf_counter())

    def intervals(self) -> list[float]:
        """Seconds between consecutive marks (call once the marked work is done)."""
        return [b.seconds_since(a) for a, b in zip(self.marks, self.marks[1:])]

    def host_intervals(self) -> list[float]:
        """Host seconds between consecutive marks: how long enqueueing each phase took."""
        return [b - a for a, b in zip(self.host, self.host[1:])]


class DecodeBatch(NamedTuple):
    """A padded decode batch, all (bs,) i64 on the device; padding rows use row 0 and 0s.

    verified_id: anchors; prefix_lens: committed KV lengths; req_rows: rows of req_to_token;
    valid: 1 for real rows, 0 for padding; live: the number of real rows (host-known).
    """

    verified_id: torch.Tensor
    prefix_lens: torch.Tensor
    req_rows: torch.Tensor
    valid: torch.Tensor
    live: int = 0


class Engine:
    """Steps of one target with one proposer (None: `Plain`, the engine's `method`) over a
    runtime's pool and graphs; the round's stage groups (`spans`) are fixed at construction
    by the method, the sampling and the target's EngineOptions."""

    def __init__(self, target: Target, proposer: Proposer | None, rt: Runtime,
                 sampling: Sampling, seed: int):
        self.target, self.sampling = target, sampling
        self.method = proposer if proposer is not None else Plain()
        self.pool, self.graphs = rt.pool, rt.graphs
        self.gen = torch.Generator(device=target.device).manual_seed(seed)
        self.method.bind(target, self.pool, self.graphs, sampling, self.gen)
        self.spans = self.method.spans(sampling, target.options)

    def prefill(self, rows: Sequence[int], chunks: Sequence[Sequence[int]],
                starts: Sequence[int],
                on_sampled: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
        """Extend row i by chunks[i] at positions starts[i].. and sample the next token.

        The rows' slots must be reserved up to starts[i] + len(chunks[i]). `on_sampled` gets
        the sampled tokens before the proposer's prefill hook (DFlash: KV injection).
        Returns (n,) i64, the token after each chunk (meaningful for a prompt's last chunk).
        """
        dev, n = self.target.device, len(rows)
        width = max(len(c) for c in chunks)
        ids = to_device([list(c) + [0] * (width - len(c)) for c in chunks], dev)
        lens = to_device([len(c) for c in chunks], dev)
        start = to_device(starts, dev)
        req_rows = to_device(rows, dev)
        j = torch.arange(width, device=dev)
        # (n, width); padding tokens repeat the last real position and write slot 0
        positions = start[:, None] + torch.minimum(j[None, :], lens[:, None] - 1)
        cache_loc = torch.where(j[None, :] < lens[:, None],
                                self.pool.req_to_token[req_rows].long().gather(1, positions), 0)
        batch = ForwardBatch(positions, cache_loc, req_rows, start + lens)
        capture = self.method.target_layer_ids
        hidden, aux = self.target.forward(ids, batch, self.pool.req_to_token, self.pool.k,
                                          self.pool.v, capture=capture,
                                          fast=self.target.options.compiled_prefill)
        last = hidden[torch.arange(n, device=dev), lens - 1]
        first = sample(self.target.logits(last), self.sampling, self.gen)
        if on_sampled is not None:
            on_sampled(first)
        self.method.prefill(ids, batch, aux)
        return first

    def round(self, batch: DecodeBatch, clock: Clock | None = None,
              on_publish: Callable[[StepOutput], None] | None = None) -> StepOutput:
        """One round (speculative) or one decode step (plain) for `batch`, on the device.

        Slots must be reserved up to prefix_lens + B for every real row. `clock` gets a mark
        after each of PHASES (the caller marks the start): a span of stages run as one graph
        counts as its verify phase, the stages before verify in it measure ~0 and those
        after it too. `on_publish` gets the results after accept and before the method's
        commit, as SGLang's on_publish (after a graph that spans both, after it).
        """
        mark = clock.mark if clock is not None else _skip
        start = (batch.verified_id, batch.prefix_lens, batch.req_rows, batch.valid)
        block = self.method.block_at(batch.live or batch.req_rows.numel())
        done: dict[str, object] = {}
        for span in self.spans:
            first = span.stages.index("verify") if "verify" in span.stages else 0
            for _ in span.stages[:first]:
                mark()
            args = (start if "propose" in span.stages else None,
                    *(done.get(stage) for stage in STAGES))
            if span.key is None:
                results = self._stages(span.stages, block, *args)
            else:
                results = self.graphs.run(span.key, self._stage_fn(span.stages, block), *args)
            for stage, result in zip(span.stages, results):
                done[stage] = result
            for stage in span.stages[first:]:
                mark()
                if stage == "accept" and on_publish is not None:
                    on_publish(done["accept"].out)
        return done["accept"].out

    def _stages(self, stages: tuple[str, ...], block: int, start, proposed=None,
                verified=None, accepted=None, committed=None) -> tuple:
        """Run `stages` (in STAGES order) after those already done; returns each one's
        result: (Round, Proposal) for propose, Verified, Accepted, and None for commit."""
        m, out = self.method, []
        rnd, proposal = proposed if proposed is not None else (None, None)
        for stage in stages:
            if stage == "propose":
                rnd = self._begin(start, block)
                proposal = m.propose(rnd)
                out.append((rnd, proposal))
            elif stage == "verify":
                verified = self.verify(rnd, proposal)
                out.append(verified)
            elif stage == "accept":
                accepted = m.accept(rnd, proposal, verified)
                out.append(accepted)
            else:
                out.append(m.commit(rnd, proposal, verified, accepted))
        return tuple(out)

    def _stage_fn(self, stages: tuple[str, ...], block: int) -> Callable:
        """`_stages` of one span as the function its CUDA graph captures. A graph that
        proposes builds its block inside, so its method's block must not vary."""
        if "propose" in stages and block != self.method.block_size:
            raise ValueError(f"a CUDA graph spanning propose needs a fixed block, got {block} "
                             f"of {self.method.block_size} (verify_schedule)")
        return lambda *args: self._stages(stages, block, *args)

    def _begin(self, start, block: int) -> Round:
        """The round's block from start = (verified_id, prefix_lens, req_rows, valid)."""
        verified_id, prefix_lens, req_rows, valid = start
        block_ids, positions, cache_loc = ops.prepare_block(
            verified_id, prefix_lens, req_rows, self.pool.req_to_token, block_size=block,
            mask_token_id=self.method.mask_token_id)
        return Round(verified_id, prefix_lens, req_rows, block_ids, positions, cache_loc, valid)

    def verify(self, rnd: Round, proposal: Proposal) -> Verified:
        """The verify stage: one target forward over the proposal's T candidates at table
        positions prefix..prefix+T-1, capturing the method's layers; a tree's nodes under
        its ancestor mask, rotated at prefix + depth."""
        t = proposal.candidates.shape[1]
        positions, cache_loc = rnd.positions, rnd.cache_loc
        if t != positions.shape[1]:  # fewer candidates than the block (a small tree)
            positions, cache_loc = positions[:, :t], cache_loc[:, :t]
        args = (proposal.candidates, positions, cache_loc, rnd.req_rows, rnd.prefix_lens + t)
        if proposal.tree is not None:
            args += (proposal.mask, rnd.prefix_lens[:, None] + proposal.tree.depth)
        return Verified(*self.graphs.run(self.method.verify_key, self._forward, *args))

    def _forward(self, candidates, positions, cache_loc, req_rows, kv_lens, tree_mask=None,
                 rope_positions=None):
        batch = ForwardBatch(positions, cache_loc, req_rows, kv_lens)
        hidden, aux = self.target.forward(candidates, batch, self.pool.req_to_token,
                                          self.pool.k, self.pool.v,
                                          capture=self.method.target_layer_ids,
                                          rope_positions=rope_positions, tree_mask=tree_mask)
        return self.target.logits(hidden), aux


def _skip() -> None:
    """A phase mark when nobody measures."""
