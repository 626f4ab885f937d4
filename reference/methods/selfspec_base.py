"""Self-speculative methods: one model drafts (at MASK positions) and verifies itself.

A mode (reference/methods/isd.py, reference/methods/linearspec.py) is a `Proposer` whose
drafts come from the target itself: it fills in the engine's round (propose, then the
engine's verify forward, then its own accept and commit), so it runs in the one host loop
(reference/serve/loop.py) like every other method, and `generate()`, the server and
`workbench decode` all reach it. It keeps its per-request device state in arrays indexed by
the request's pool row, so finished requests leave the batch without any re-packing;
padding rows use row 0.

As in the rest of the engine, `prefix_len` counts the tokens whose KV is committed and the
last emitted token (`pending`, the anchor) has none yet. A round writes K/V for every query
token at positions prefix_len.., commits `n_out` of them (the advance), and trims the rest:
trimming is logical, as the slots stay reserved to committed + 2 * max_query and the next
round overwrites them before any query can see them (attention only reads keys < kv_lens).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from reference.model import ForwardBatch
from reference.proposers import Accepted, Proposal, Proposer, Round, StepOutput, Verified


class RoundResult(NamedTuple):
    """One round of a mode for bs requests, all (bs,) i64 unless noted.

    out_tokens (bs, W): the first n_out columns are the committed tokens (the last one is
    the next pending token); n_out: tokens committed = KV slots kept (the advance);
    written: KV slots written (query tokens), so trim = written - n_out; tested / accepted:
    drafts compared with the target and accepted (per-token acceptance = accepted / tested).
    """

    out_tokens: torch.Tensor
    n_out: torch.Tensor
    written: torch.Tensor
    tested: torch.Tensor
    accepted: torch.Tensor


class SelfSpecMode(Proposer):
    """Base class of a self-speculative mode.

    Attributes:
        max_query: most query tokens per request in one round (KV slots written beyond the
            committed prefix); it is the mode's `block_size` for reservations.
        forwards_per_round: target forwards in one round (ISD 1, LinearSpec 2).
        mask_token_id: the MASK id fed at draft positions.
    """

    max_query: int = 1
    forwards_per_round: int = 1

    @property
    def block_size(self) -> int:
        return self.max_query

    def bind(self, target, pool, graphs, *args) -> None:
        super().bind(target, pool, graphs, *args)
        dev = target.device
        self._counts = torch.zeros(3, dtype=torch.int64, device=dev)  # n_out, tested, accepted
        self._trims = torch.zeros(self.max_query + 1, dtype=torch.int64, device=dev)
        self._rounds = 0

    def start(self, rows, request_ids, prompt_lens) -> None:
        """New requests got pool rows `rows`: reset their state."""
        self.reset(torch.as_tensor(rows, dtype=torch.int64).to(self.target.device,
                                                                  non_blocking=True))

    def reset(self, rows: torch.Tensor) -> None:
        """Reset the per-row state of rows (n,) i64."""

    def judge(self, rnd: Round, proposal: Proposal, verified: Verified) -> RoundResult:
        """The mode's acceptance over the verify forward's logits (bs, T, V)."""
        raise NotImplementedError

    def accept(self, rnd: Round, proposal: Proposal, verified: Verified) -> Accepted:
        """`judge`, counted over the real rows; commit_len = n_out (the last committed token
        is the next anchor)."""
        res, valid = self.judge(rnd, proposal, verified), rnd.valid
        n_out = res.n_out * valid
        self._counts += torch.stack([n_out, res.tested * valid, res.accepted * valid]).sum(1)
        trims = torch.where(valid.bool(), res.written - res.n_out, self.max_query)
        self._trims += torch.bincount(trims, minlength=self.max_query + 1)[: self.max_query + 1]
        self._rounds += 1
        last = (n_out - 1).clamp(min=0)[:, None]
        return Accepted(StepOutput(n_out.to(torch.int32), res.out_tokens,
                                   res.out_tokens.gather(1, last)[:, 0] * valid,
                                   (rnd.prefix_lens + n_out) * valid))

    def stats(self) -> dict:
        """decode_tokens (committed by rounds, before the host's cut), tested / accepted
        drafts and acceptance = accepted / tested, trim_hist {trimmed slots: request rounds},
        forwards_per_round."""
        if not hasattr(self, "_counts"):
            return {}
        committed, tested, accepted = self._counts.tolist()
        trims = self._trims.tolist()[: self.max_query]
        return {"decode_tokens": committed, "tested": tested, "accepted": accepted,
                "acceptance": accepted / max(tested, 1),
                "trim_hist": {t: n for t, n in enumerate(trims) if n},
                "forwards_per_round": self.forwards_per_round}

    def forward(self, ids: torch.Tensor, rows: torch.Tensor, prefix_lens: torch.Tensor,
                causal: bool = True) -> torch.Tensor:
        """Target logits (bs, T, V) of ids (bs, T) at positions prefix_len + t; writes their
        K/V at those positions' slots and lets them see keys < prefix_len + T."""
        t = ids.shape[1]
        positions = prefix_lens[:, None] + torch.arange(t, device=ids.device)
        cache_loc = self.pool.req_to_token[rows].long().gather(1, positions)
        batch = ForwardBatch(positions, cache_loc, rows, prefix_lens + t)
        hidden, _ = self.target.forward(ids, batch, self.pool.req_to_token, self.pool.k,
                                        self.pool.v, causal=causal)
        return self.target.logits(hidden)
