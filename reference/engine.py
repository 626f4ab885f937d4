"""The device work of one engine step, shared by `generate` and the serving loop.

`Engine.prefill` extends request rows by ragged prompt chunks (a whole prompt, or one chunk
of a chunked prefill) and samples the token after each chunk. `Engine.round` runs one
speculative round for a padded batch (shared/design/ARCHITECTURE.md, "Hot path"):
prepare_block -> propose -> verify (target forward over B tokens, capturing the proposer's
layers) -> accept (greedy accept_bonus or chain sampling) -> publish -> commit (DFlash: KV
injection of the committed columns). Plain decoding (proposer None) is the same round with
B = 1 and no draft. Neither touches the host's view of the requests, and neither waits for
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
from reference.proposers import Proposal, Proposer, Round
from reference.verify import Sampling, sample, verify_greedy, verify_sampling

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


class StepOutput(NamedTuple):
    """One round's results, (bs,) unless noted; zero on padding rows except out_tokens.

    commit_lens i32 (accept_len + 1); out_tokens (bs, B) i64 whose first commit_len columns
    are the committed tokens; bonus i64, the next anchor; new_seq_lens i64 = prefix + commit.
    """

    commit_lens: torch.Tensor
    out_tokens: torch.Tensor
    bonus: torch.Tensor
    new_seq_lens: torch.Tensor


def _plain_output(nxt: torch.Tensor, prefix_lens: torch.Tensor, valid: torch.Tensor
                  ) -> StepOutput:
    """A plain decode step's results from its token nxt (bs,) i64: one token committed per
    real row (commit_lens (bs,) i32, out_tokens (bs, 1)), zeros on padding rows."""
    return StepOutput(valid.to(torch.int32), nxt[:, None], nxt * valid,
                      (prefix_lens + 1) * valid)


class Engine:
    """Steps of one target with one proposer (or none) over a runtime's pool and graphs."""

    def __init__(self, target: Target, proposer: Proposer | None, rt: Runtime,
                 sampling: Sampling, seed: int):
        self.target, self.proposer, self.sampling = target, proposer, sampling
        self.pool, self.graphs = rt.pool, rt.graphs
        self.gen = torch.Generator(device=target.device).manual_seed(seed)
        if proposer is not None:
            proposer.bind(target, self.pool, self.graphs, sampling, self.gen)

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
        capture = self.proposer.target_layer_ids if self.proposer else ()
        hidden, aux = self.target.forward(ids, batch, self.pool.req_to_token, self.pool.k,
                                          self.pool.v, capture=capture,
                                          fast=self.target.options.compiled_prefill)
        last = hidden[torch.arange(n, device=dev), lens - 1]
        first = sample(self.target.logits(last), self.sampling, self.gen)
        if on_sampled is not None:
            on_sampled(first)
        if self.proposer is not None:
            self.proposer.prefill(ids, batch, aux)
        return first

    def _decode_fn(self, ids, positions, cache_loc, req_rows, kv_lens):
        batch = ForwardBatch(positions, cache_loc, req_rows, kv_lens)
        hidden, _ = self.target.forward(ids, batch, self.pool.req_to_token, self.pool.k,
                                        self.pool.v)
        return self.target.logits(hidden[:, -1])

    def _decode_step_fn(self, verified_id, prefix_lens, req_rows, valid):
        """A whole greedy decode step (EngineOptions.graphed_decode): prepare_block, the
        forward, the argmax and the step's outputs, one graph launch instead of ten.

        verified_id, prefix_lens, req_rows, valid: (bs,) i64 (DecodeBatch). Returns the
        step's StepOutput (`_plain_output`)."""
        ids, positions, cache_loc = ops.prepare_block(
            verified_id, prefix_lens, req_rows, self.pool.req_to_token, block_size=1,
            mask_token_id=0)
        nxt = self._decode_fn(ids, positions, cache_loc, req_rows, prefix_lens + 1).argmax(-1)
        return _plain_output(nxt, prefix_lens, valid)

    def _verify_fn(self, candidates, positions, cache_loc, req_rows, kv_lens):
        batch = ForwardBatch(positions, cache_loc, req_rows, kv_lens)
        hidden, aux = self.target.forward(candidates, batch, self.pool.req_to_token,
                                          self.pool.k, self.pool.v,
                                          capture=self.proposer.target_layer_ids)
        return self.target.logits(hidden), aux

    def round(self, batch: DecodeBatch, clock: Clock | None = None,
              on_publish: Callable[[StepOutput], None] | None = None) -> StepOutput:
        """One round (speculative) or one decode step (plain) for `batch`, on the device.

        Slots must be reserved up to prefix_lens + B for every real row. `clock` gets a mark
        after each of PHASES (the caller marks the start). `on_publish` gets the results after
        accept and before the proposer's commit (KV injection), as SGLang's on_publish.
        """
        mark = clock.mark if clock is not None else (lambda: None)
        if self.proposer is not None and self.proposer.owns_round:
            return self._owned_round(batch, mark, on_publish)
        if (self.proposer is None and self.sampling.greedy
                and self.target.options.graphed_decode):
            mark()
            return self._graphed_tail(self.graphs.run(
                ("decode", "step"), self._decode_step_fn, batch.verified_id,
                batch.prefix_lens, batch.req_rows, batch.valid), mark, on_publish)
        block = (self.proposer.block_at(batch.live or batch.req_rows.numel())
                 if self.proposer else 1)
        block_ids, positions, cache_loc = ops.prepare_block(
            batch.verified_id, batch.prefix_lens, batch.req_rows, self.pool.req_to_token,
            block_size=block, mask_token_id=self.proposer.mask_token_id
            if self.proposer else 0)
        kv_lens = batch.prefix_lens + block
        valid = batch.valid
        if self.proposer is None:
            mark()
            logits = self.graphs.run(("decode",), self._decode_fn, block_ids, positions,
                                     cache_loc, batch.req_rows, kv_lens)
            mark()
            out = _plain_output(sample(logits, self.sampling, self.gen), batch.prefix_lens,
                                valid)
            mark()
            if on_publish is not None:
                on_publish(out)
        else:
            rnd = Round(batch.verified_id, batch.prefix_lens, batch.req_rows, block_ids,
                        positions, cache_loc)
            proposal = self.proposer.propose(rnd)
            mark()
            if self._fused_commit(proposal):
                return self._verify_commit(rnd, proposal, kv_lens, valid, mark, on_publish)
            logits, aux = self.graphs.run(("verify", self.proposer.target_layer_ids),
                                          self._verify_fn, proposal.candidates, positions,
                                          cache_loc, batch.req_rows, kv_lens)
            mark()
            if self.sampling.greedy:
                res = verify_greedy(proposal.candidates, logits, batch.prefix_lens,
                                    proposal.verify_lens)
            else:
                res = verify_sampling(proposal.candidates, logits, batch.prefix_lens,
                                      self.sampling, self.gen, proposal.q, proposal.verify_lens)
            out = StepOutput(res.commit_lens * valid.to(torch.int32), res.out_tokens,
                             res.bonus * valid, res.new_seq_lens * valid)
            mark()
            if on_publish is not None:
                on_publish(out)
            self.proposer.commit(rnd, aux, out.commit_lens)
        mark()
        return out

    def _fused_commit(self, proposal: Proposal) -> bool:
        """Acceptance and commit inside the verify graph (EngineOptions.fused_commit): at
        greedy, for a proposer whose commit is device work only, over every drafted token."""
        return (self.target.options.fused_commit and self.proposer.commit_in_graph
                and self.sampling.greedy and proposal.q is None
                and proposal.verify_lens is None)

    def _verify_commit_fn(self, candidates, positions, cache_loc, req_rows, kv_lens,
                          verified_id, prefix_lens, block_ids, valid):
        """Verify, greedy acceptance and the proposer's commit as one graphed step: the
        StepOutput's four tensors, padding rows zeroed."""
        logits, aux = self._verify_fn(candidates, positions, cache_loc, req_rows, kv_lens)
        res = verify_greedy(candidates, logits, prefix_lens)
        commit_lens = res.commit_lens * valid.to(torch.int32)
        self.proposer.commit(Round(verified_id, prefix_lens, req_rows, block_ids, positions,
                                   cache_loc), aux, commit_lens)
        return commit_lens, res.out_tokens, res.bonus * valid, res.new_seq_lens * valid

    def _verify_commit(self, rnd: Round, proposal: Proposal, kv_lens: torch.Tensor,
                       valid: torch.Tensor, mark: Callable[[], None],
                       on_publish: Callable[[StepOutput], None] | None) -> StepOutput:
        """The fused path of `round` after the draft: the verify phase's mark covers
        acceptance and commit, whose own phases then measure ~0."""
        key = ("verify_commit", self.proposer.target_layer_ids, self.proposer.graph_key)
        return self._graphed_tail(StepOutput(*self.graphs.run(
            key, self._verify_commit_fn, proposal.candidates, rnd.positions, rnd.cache_loc,
            rnd.req_rows, kv_lens, rnd.verified_id, rnd.prefix_lens, rnd.block_ids, valid)),
            mark, on_publish)

    @staticmethod
    def _graphed_tail(out: StepOutput, mark: Callable[[], None],
                      on_publish: Callable[[StepOutput], None] | None) -> StepOutput:
        """After a graph that ran a whole round (the graphed decode step, or the fused verify,
        accept and commit): the verify mark covers it all, so accept and inject measure ~0;
        then publish."""
        mark()
        mark()
        if on_publish is not None:
            on_publish(out)
        mark()
        return out

    def _owned_round(self, batch: DecodeBatch, mark: Callable[[], None],
                     on_publish: Callable[[StepOutput], None] | None) -> StepOutput:
        """A round the proposer runs itself (self-speculation): its forwards count as verify."""
        mark()
        commit_lens, out_tokens = self.proposer.run_round(
            batch.req_rows, batch.prefix_lens, batch.verified_id, batch.valid, batch.live)
        mark()
        last = (commit_lens - 1).clamp(min=0)[:, None]
        out = StepOutput(commit_lens.to(torch.int32), out_tokens,
                         out_tokens.gather(1, last)[:, 0] * batch.valid,
                         (batch.prefix_lens + commit_lens) * batch.valid)
        mark()
        if on_publish is not None:
            on_publish(out)
        mark()
        return out
