"""The Proposer interface of the speculative engine.

A round of block verification (shared/design/ARCHITECTURE.md, "Hot path") asks a proposer
for `B` candidates per request, `[anchor, d_1 .. d_{B-1}]`, optionally with the draft
distribution q of each drafted token, then tells it which columns the target committed.
The hooks cover the proposers the workbench needs: DFlash (block drafter with KV injection,
reference/methods/dflash_drafter.py), an autoregressive chain drafter (q from its softmax),
DSpark and self-speculation (drafts from the target's own captured hidden states).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import torch

from common.batch_schedule import Schedule, drafts_for, parse_schedule
from reference.kv_pool import KVPool, KVShape
from reference.model import Target
from reference.verify import Sampling

GREEDY = Sampling()


class Round(NamedTuple):
    """Device state of one round for a padded batch of bs rows (padding rows use row 0).

    verified_id, prefix_lens, req_rows: (bs,) i64; block_ids, positions, cache_loc: (bs, B)
    i64 from `prepare_block`.
    """

    verified_id: torch.Tensor
    prefix_lens: torch.Tensor
    req_rows: torch.Tensor
    block_ids: torch.Tensor
    positions: torch.Tensor
    cache_loc: torch.Tensor


class Proposal(NamedTuple):
    """candidates: (bs, B) i64 = [anchor, d_1 .. d_{B-1}]; q: (bs, B-1, V) fp32 draft
    distribution of each d_j, or None for a deterministic (one-hot) draft; verify_lens: (bs,)
    i64 drafts to verify per request (DSpark's ragged l_r, at most B-1), or None for all."""

    candidates: torch.Tensor
    q: torch.Tensor | None = None
    verify_lens: torch.Tensor | None = None


class Proposer:
    """Base class: override `propose`, and the hooks the method needs.

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
        owns_round: the proposer runs the whole round itself (`run_round`).
        commit_in_graph: `commit` is device work only (no host state, no sync, the same
            result when called twice), so the engine may run it inside the verify CUDA
            graph (EngineOptions.fused_commit).
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
    owns_round: bool = False
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

    def commit(self, rnd: Round, aux: torch.Tensor | None, commit_lens: torch.Tensor) -> None:
        """After verify: aux (bs, B, K*H) of the block, commit_lens (bs,) i32 (0 on padding)."""

    def run_round(self, rows: torch.Tensor, prefix_lens: torch.Tensor, pending: torch.Tensor,
                  valid: torch.Tensor, live: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole round, for a method that runs its own target forwards (`owns_round`:
        self-speculation). rows, prefix_lens, pending, valid: (bs,) i64 of the padded batch;
        live: its real rows. Returns commit_lens (bs,) i64 and out_tokens (bs, W) i64 whose
        first commit_len columns are the committed tokens (the last one the next anchor).
        Writes K/V only at positions prefix_len .. prefix_len + block_size - 1."""
        raise NotImplementedError

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
