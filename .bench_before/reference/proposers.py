"""The Proposer interface of the speculative engine, and the oracle proposer.

A round of block verification (shared/design/ARCHITECTURE.md, "Hot path") asks a proposer
for `B` candidates per request, `[anchor, d_1 .. d_{B-1}]`, optionally with the draft
distribution q of each drafted token, then tells it which columns the target committed.
The hooks cover the proposers the workbench needs: DFlash (block drafter with KV injection,
reference/dflash.py), an autoregressive chain drafter (q from its softmax), DSpark and
self-speculation (drafts from the target's own captured hidden states).

The oracle proposer drafts the target's own greedy continuation, precomputed by a plain run,
and corrupts drafted token j with probability 1 - s_j / s_{j-1}, so that the number of
accepted drafts follows a configured survival curve s_j = P(accept_len >= j).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from reference.device import to_device
from reference.kv_pool import KVPool, KVShape
from reference.model import Target


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
        block_size: B, tokens verified per round (anchor included).
        mask_token_id: id `prepare_block` writes at block positions 1..B-1.
        target_layer_ids: target layers whose outputs the engine captures (prefill, verify).
        draft_kv: K/V geometry the shared pool must hold for the proposer, or None.
    """

    block_size: int = 1
    mask_token_id: int = 0
    target_layer_ids: tuple[int, ...] = ()
    draft_kv: KVShape | None = None

    def bind(self, target: Target, pool: KVPool, graphs) -> None:
        """Called once per generate() with the engine's pool and CUDA-graph cache."""
        self.target, self.pool, self.graphs = target, pool, graphs

    def start(self, rows: Sequence[int], request_ids: Sequence[int],
              prompt_lens: Sequence[int]) -> None:
        """Requests `request_ids` (indices into generate's prompts) got table `rows`."""

    def prefill(self, input_ids: torch.Tensor, batch, aux: torch.Tensor | None) -> None:
        """After the target prefill of input_ids (bs, T); aux (bs, T, K*H) or None."""

    def propose(self, rnd: Round) -> Proposal:
        raise NotImplementedError

    def commit(self, rnd: Round, aux: torch.Tensor | None, commit_lens: torch.Tensor) -> None:
        """After verify: aux (bs, B, K*H) of the block, commit_lens (bs,) i32 (0 on padding)."""


def geometric_survival(tau: float, block_size: int) -> list[float]:
    """s_j = alpha^j (j = 1..B-1) with 1 + sum_j s_j = tau, solved by bisection."""
    if not 1.0 <= tau <= block_size:
        raise ValueError(f"tau={tau} must lie in [1, B={block_size}]")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        alpha = (lo + hi) / 2
        if 1 + sum(alpha**j for j in range(1, block_size)) < tau:
            lo = alpha
        else:
            hi = alpha
    return [lo**j for j in range(1, block_size)]


class OracleProposer(Proposer):
    """Drafts streams[i] (request i's greedy continuation), corrupted to a survival curve.

    Args:
        streams: per request, the tokens a plain greedy run generated after its prompt.
        block_size: B.
        survival: s_1..s_{B-1}, non-increasing in [0, 1]; None means never corrupt.
        seed: seeds the corruption.
        shadow: a real proposer whose work (draft forward, KV injection) runs every round
            and whose drafts are discarded: the cost of the method at oracle acceptance.
    """

    def __init__(self, streams: Sequence[Sequence[int]], block_size: int,
                 survival: Sequence[float] | None = None, seed: int = 0,
                 shadow: Proposer | None = None):
        if shadow is not None and shadow.block_size != block_size:
            raise ValueError(f"shadow block_size {shadow.block_size} != {block_size}")
        self.shadow = shadow
        if shadow is not None:
            self.mask_token_id = shadow.mask_token_id
            self.target_layer_ids, self.draft_kv = shadow.target_layer_ids, shadow.draft_kv
        survival = [1.0] * (block_size - 1) if survival is None else list(survival)
        if len(survival) != block_size - 1:
            raise ValueError(f"survival has {len(survival)} entries, expected B-1 = "
                             f"{block_size - 1}")
        prev = 1.0
        self.keep_prob = []
        for s in survival:
            if not 0.0 <= s <= prev:
                raise ValueError(f"survival must be non-increasing in [0, 1], got {survival}")
            self.keep_prob.append(s / prev if prev > 0 else 0.0)
            prev = s
        self.streams, self.block_size, self.seed = [list(s) for s in streams], block_size, seed

    def bind(self, target: Target, pool: KVPool, graphs) -> None:
        super().bind(target, pool, graphs)
        if self.shadow is not None:
            self.shadow.bind(target, pool, graphs)
        device, rows = target.device, pool.req_to_token.shape[0]
        width = max([len(s) for s in self.streams] + [1])
        self._stream = torch.zeros(rows, width, dtype=torch.int64, device=device)
        self._prompt_len = torch.zeros(rows, dtype=torch.int64, device=device)
        self._keep = torch.tensor(self.keep_prob, dtype=torch.float32, device=device)
        self._gen = torch.Generator(device=device)
        self._gen.manual_seed(self.seed)

    def start(self, rows, request_ids, prompt_lens) -> None:
        streams = torch.zeros(len(rows), self._stream.shape[1], dtype=torch.int64)
        for i, rid in enumerate(request_ids):
            streams[i, : len(self.streams[rid])] = torch.tensor(self.streams[rid],
                                                                dtype=torch.int64)
        device = self._stream.device
        index = to_device(rows, device)  # asynchronous: the serving loop calls this mid-flight
        self._stream[index] = to_device(streams, device)
        self._prompt_len[index] = to_device(prompt_lens, device)

    def prefill(self, input_ids, batch, aux) -> None:
        if self.shadow is not None:
            self.shadow.prefill(input_ids, batch, aux)

    def commit(self, rnd: Round, aux, commit_lens) -> None:
        if self.shadow is not None:
            self.shadow.commit(rnd, aux, commit_lens)

    def propose(self, rnd: Round) -> Proposal:
        if self.shadow is not None:
            self.shadow.propose(rnd)
        bs, vocab = rnd.positions.shape[0], self.target.config.vocab_size
        # Generated-token index of block position j: positions - prompt_len.
        index = rnd.positions[:, 1:] - self._prompt_len[rnd.req_rows][:, None]
        index = index.clamp(0, self._stream.shape[1] - 1)
        drafts = self._stream[rnd.req_rows[:, None], index]
        u = torch.rand(drafts.shape, generator=self._gen, device=drafts.device)
        shift = torch.randint(1, max(vocab, 2), drafts.shape, generator=self._gen,
                              device=drafts.device)
        drafts = torch.where(u < self._keep, drafts, (drafts + shift) % vocab)
        return Proposal(torch.cat([rnd.verified_id.view(bs, 1), drafts], dim=1))
