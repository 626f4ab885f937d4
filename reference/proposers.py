"""The round's stages and the Proposer interface of the speculative engine.

A round (reference/engine.py, `Engine.round`) runs four stages for a padded batch:

    propose(rnd) -> Proposal                          the method: tokens to verify, optionally
                                                      a tree (its ancestor mask, its depths)
    verify(rnd, proposal) -> Verified                 the engine: one target forward
    accept(rnd, proposal, verified) -> Accepted       the method: greedy, sampling, tree path
    commit(rnd, proposal, verified, accepted) -> None the method: its state, KV injection,
                                                      slot compaction

`Proposer.spans` groups consecutive stages into one CUDA graph each (a stage may also graph
its own work inside: a graph run inside another's capture becomes part of it). The hooks
cover every method of the workbench: DFlash (block drafter with KV injection,
reference/methods/dflash_drafter.py) as a chain or a tree, autoregressive chain drafters (q
from their softmax), DSpark, prompt lookup, the oracle, and self-speculation, which proposes
with the target itself. `Plain` is plain decoding, the case B = 1 with no draft.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch

from common.batch_schedule import Schedule, drafts_for, parse_schedule
from reference.kv_pool import KVPool, KVShape
from reference.model import Target
from reference.verify import Sampling, sample, verify_greedy, verify_sampling

if TYPE_CHECKING:
    from reference.tree import Tree

GREEDY = Sampling()
STAGES = ("propose", "verify", "accept", "commit")


class Round(NamedTuple):
    """Device state of one round for a padded batch of bs rows (padding rows use row 0).

    verified_id, prefix_lens, req_rows: (bs,) i64; block_ids, positions, cache_loc: (bs, B)
    i64 from `prepare_block` (B = `Proposer.block_at` of the live requests); valid: (bs,) i64,
    1 for real rows and 0 for padding (set by the engine).
    """

    verified_id: torch.Tensor
    prefix_lens: torch.Tensor
    req_rows: torch.Tensor
    block_ids: torch.Tensor
    positions: torch.Tensor
    cache_loc: torch.Tensor
    valid: torch.Tensor | None = None


class Proposal(NamedTuple):
    """What the target verifies: candidates (bs, T) i64 at table positions prefix..prefix+T-1
    (T <= the round's B). A chain: [anchor, d_1 .. d_{T-1}]; q: (bs, T-1, V) fp32 draft
    distribution of each d_j, or None for a deterministic (one-hot) draft; verify_lens: (bs,)
    i64 drafts to verify per request (DSpark's ragged l_r, at most T-1), or None for all.
    A tree of T nodes: candidates = tree.tokens, verified under `mask` (bs, T, T) bool, the
    ancestor mask (a node sees its own path), with node i rotated at prefix + depth_i."""

    candidates: torch.Tensor
    q: torch.Tensor | None = None
    verify_lens: torch.Tensor | None = None
    tree: Tree | None = None
    mask: torch.Tensor | None = None


class Verified(NamedTuple):
    """The target's verify forward over a proposal's T tokens: logits (bs, T, V), row j
    scoring the token after candidate j; aux (bs, T, K*H), the captured layers
    (`Proposer.target_layer_ids`), or None."""

    logits: torch.Tensor
    aux: torch.Tensor | None = None


class StepOutput(NamedTuple):
    """One round's results, (bs,) unless noted; zero on padding rows except out_tokens.

    commit_lens i32 (accept_len + 1); out_tokens (bs, W) i64 whose first commit_len columns
    are the committed tokens; bonus i64, the next anchor; new_seq_lens i64 = prefix + commit.
    """

    commit_lens: torch.Tensor
    out_tokens: torch.Tensor
    bonus: torch.Tensor
    new_seq_lens: torch.Tensor


class Accepted(NamedTuple):
    """The accept stage's result: out, the round's StepOutput; path (bs, D+1) i64, the
    verified columns committed in order (a tree's accepted nodes, -1 beyond), or None when
    they are the first commit_len columns (a chain)."""

    out: StepOutput
    path: torch.Tensor | None = None


class Span(NamedTuple):
    """Consecutive stages (names of STAGES) run as one CUDA graph under `key`, or one by
    one when key is None (each stage may graph its own work)."""

    stages: tuple[str, ...]
    key: Hashable | None = None


class Proposer:
    """Base class: override `propose`, and the stages and hooks the method needs (`accept`
    defaults to the chain's greedy or speculative-sampling rule, `commit` to nothing).

    Attributes:
        block_size: B, tokens verified per round (anchor included); the most a round
            verifies, and what the engine reserves KV slots for.
        verify_schedule: drafts per request by the batch's live requests, vLLM's `[lo, hi,
            K]` rows (common/batch_schedule.py, as the simulator's spec.verify_schedule): a
            round of n live requests verifies min(K(n) + 1, block_size) tokens (`block_at`);
            None: block_size always. Only proposers whose `propose` drafts the width of
            `Round.block_ids` take it (DFlash's chain, the oracle): a large batch verifies
            fewer tokens for a smaller loss of tau.
        mask_token_id: id `prepare_block` writes at block positions 1..B-1.
        target_layer_ids: target layers whose outputs the engine captures (prefill, verify).
        draft_kv: K/V geometry the shared pool must hold for the proposer, or None.
        commit_in_graph: `commit` is device work only (no host state, no sync, the same
            result when called twice), so the engine may run it inside the verify CUDA
            graph (EngineOptions.fused_commit; `spans`).
        graph_key: names the proposer's graphed work in CUDA-graph keys (its own and the
            engine's fused verify + commit): a graph captured for one proposer is replayed
            for another with the same key, so proposers share a key only when their graphs
            read the same weights and buffers besides their inputs (default: this object).
    """

    block_size: int = 1
    verify_schedule: Schedule | None = None
    mask_token_id: int = 0
    target_layer_ids: tuple[int, ...] = ()
    draft_kv: KVShape | None = None
    commit_in_graph: bool = False

    @property
    def graph_key(self) -> Hashable:
        return id(self)

    def block_at(self, n: int) -> int:
        """The block a round of `n` live requests verifies (`verify_schedule`)."""
        if self.verify_schedule is None:
            return self.block_size
        return min(drafts_for(self.verify_schedule, n) + 1, self.block_size)

    def bind(self, target: Target, pool: KVPool, graphs, sampling: Sampling = GREEDY,
             gen: torch.Generator | None = None) -> None:
        """Called by each Engine with its pool, CUDA-graph cache, sampling and generator."""
        self.target, self.pool, self.graphs = target, pool, graphs
        self.sampling, self.gen = sampling, gen

    def start(self, rows: Sequence[int], request_ids: Sequence[int],
              prompt_lens: Sequence[int]) -> None:
        """Requests `request_ids` (indices into generate's prompts) got table `rows`."""

    def prefill(self, input_ids: torch.Tensor, batch, aux: torch.Tensor | None) -> None:
        """After the target prefill of input_ids (bs, T); aux (bs, T, K*H) or None."""

    def propose(self, rnd: Round) -> Proposal:
        raise NotImplementedError

    def accept(self, rnd: Round, proposal: Proposal, verified: Verified) -> Accepted:
        """The chain's rule: greedy `accept_bonus`, or chain speculative sampling with the
        proposal's q, each over at most verify_lens drafts (reference/verify.py)."""
        if self.sampling.greedy:
            res = verify_greedy(proposal.candidates, verified.logits, rnd.prefix_lens,
                                proposal.verify_lens)
        else:
            res = verify_sampling(proposal.candidates, verified.logits, rnd.prefix_lens,
                                  self.sampling, self.gen, proposal.q, proposal.verify_lens)
        valid = rnd.valid
        return Accepted(StepOutput(res.commit_lens * valid.to(torch.int32), res.out_tokens,
                                   res.bonus * valid, res.new_seq_lens * valid))

    def commit(self, rnd: Round, proposal: Proposal, verified: Verified,
               accepted: Accepted) -> None:
        """After accept: the method's state, KV injection (accepted.out.commit_lens (bs,)
        i32, 0 on padding)."""

    def spans(self, sampling: Sampling, options) -> tuple[Span, ...]:
        """The round's stages as CUDA graphs: verify, accept and commit as one at greedy
        with `options.fused_commit` for a `commit_in_graph` method, else one by one."""
        if options.fused_commit and self.commit_in_graph and sampling.greedy:
            key = ("verify_commit", self.target_layer_ids, self.graph_key)
            return Span(("propose",)), Span(("verify", "accept", "commit"), key)
        return tuple(Span((stage,)) for stage in STAGES)

    @property
    def verify_key(self) -> Hashable:
        """The CUDA-graph key of the verify forward alone: it reads the target, the pool and
        its inputs only, so methods capturing the same layers share it."""
        return ("verify", self.target_layer_ids)

    def stats(self) -> dict:
        """Counters of the method over its runs since `bind` (read after the device is done)."""
        return {}


def parse_verify_schedule(rows) -> Schedule | None:
    """A proposer's `verify_schedule` from a method option's `[lo, hi, K]` rows (None: none).
    Raises ValueError on rows `parse_schedule` refuses, or a K of 0: the engine's rounds
    verify at least one draft."""
    if rows is None:
        return None
    schedule = parse_schedule(rows)
    if any(k < 1 for _, _, k in schedule):
        raise ValueError(f"verify_schedule={[list(r) for r in schedule]}: K = 0 (no "
                         "speculation) is the simulator's; the engine drafts K >= 1")
    return schedule


class Plain(Proposer):
    """Plain decoding: B = 1, the anchor is the only candidate, the token after it is
    sampled from the target (argmax at greedy). With `options.graphed_decode` at greedy the
    whole step is one CUDA graph."""

    def propose(self, rnd: Round) -> Proposal:
        return Proposal(rnd.block_ids)

    def accept(self, rnd: Round, proposal: Proposal, verified: Verified) -> Accepted:
        nxt = sample(verified.logits[:, -1], self.sampling, self.gen)
        return Accepted(StepOutput(rnd.valid.to(torch.int32), nxt[:, None], nxt * rnd.valid,
                                   (rnd.prefix_lens + 1) * rnd.valid))

    def spans(self, sampling: Sampling, options) -> tuple[Span, ...]:
        if options.graphed_decode and sampling.greedy:
            return (Span(STAGES, ("decode", "step")),)
        return tuple(Span((stage,)) for stage in STAGES)

    @property
    def verify_key(self) -> Hashable:
        return ("decode",)
