"""The Proposer interface of the speculative engine.

A round of block verification (shared/design/ARCHITECTURE.md, "Hot path") asks a proposer
for `B` candidates per request, `[anchor, d_1 .. d_{B-1}]`, optionally with the draft
distribution q of each drafted token, then tells it which columns the target committed.
The hooks cover the proposers the workbench needs: DFlash (block drafter with KV injection,
reference/dflash.py), an autoregressive chain drafter (q from its softmax), DSpark and
self-speculation (drafts from the target's own captured hidden states).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import torch

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
        verify_blocks: ((bs_1, B_1), (bs_2, B_2), ...), bs ascending, each B_i in
            [2, block_size]: a round of a padded batch of at least bs_i rows verifies
            blocks of B_i (the last such entry); below bs_1, block_size (`block_at`). Only
            proposers whose `propose` drafts the width of `Round.block_ids` take it (DFlash's
            chain, the oracle): a large batch verifies fewer tokens for a smaller loss of
            tau.
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
    verify_blocks: tuple[tuple[int, int], ...] = ()
    mask_token_id: int = 0
    target_layer_ids: tuple[int, ...] = ()
    draft_kv: KVShape | None = None
    owns_round: bool = False
    commit_in_graph: bool = False

    @property
    def graph_key(self) -> Hashable:
        return id(self)

    def block_at(self, bs: int) -> int:
        """The block a round of `bs` padded rows verifies (`verify_blocks`)."""
        block = self.block_size
        for at, b in self.verify_blocks:
            if bs >= at:
                block = b
        return block

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


def verify_blocks(text: str | None, block_size: int) -> tuple[tuple[int, int], ...]:
    """`verify_blocks` from a method option: "16:10/64:6" (from a padded batch of 16 rows,
    blocks of 10; from 64, of 6); None or "" for none. Raises ValueError on a malformed
    entry, a block outside [2, block_size] or batch sizes not ascending."""
    if not text:
        return ()
    try:
        pairs = tuple(tuple(int(v) for v in item.split(":")) for item in str(text).split("/"))
    except ValueError:
        pairs = ((),)
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"blocks={text!r}: expected BS:B entries joined by '/', e.g. 16:10/64:6")
    sizes = [at for at, _ in pairs]
    if sizes != sorted(set(sizes)) or sizes[0] < 1:
        raise ValueError(f"blocks={text!r}: batch sizes must be >= 1 and ascending")
    for at, b in pairs:
        if not 2 <= b <= block_size:
            raise ValueError(f"blocks={text!r}: block {b} at bs {at} outside [2, B={block_size}]")
    return pairs
