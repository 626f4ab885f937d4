"""The EAGLE-3-style baseline in the engine: an autoregressive chain drafter on fused
target features.

One Qwen3 layer whose input at position t is `in_proj([embed(x_t) ; g_{t-1}])` (in_proj:
(H, 2H)), where g_{t-1} = hidden_norm(fc(captured target states of t-1)) for committed
context; its output at t predicts x_{t+1}. Drafting from anchor p takes B-1 sequential
one-token steps: step j reads the drafted token x_{p+j} and, in place of the target
feature it does not have yet, its own previous output (through hidden_norm, for scale),
attending causally to the context K/V and its earlier steps. Stored like a DFlash drafter
(config.json with dflash_config.variant = "eagle", one layer) plus `in_proj.weight`; the toy
world trains it (toy/eagle.py). Options: `path`, `block_size`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from reference.loaders import read_safetensors
from reference.methods.dflash import load_dflash
from reference.methods.dflash_drafter import DFlashProposer, Drafter, context_hidden, draft_stack
from reference.model import ForwardBatch, Target, rms_norm
from reference.proposers import Proposal, Round
from reference.registry import register


def eagle_inputs(drafter: Drafter, in_proj: torch.Tensor, target: Target, ids: torch.Tensor,
                 features: torch.Tensor) -> torch.Tensor:
    """in_proj([embed(ids) ; g]) (..., H) for ids (...) and g = features already fused (H)."""
    return torch.cat([target.embed[ids], features], dim=-1) @ in_proj.t()


def chain(drafter: Drafter, in_proj: torch.Tensor, target: Target, tokens, feature,
          positions, cache_loc, req_rows, prefix_lens, req_to_token, k_pool, v_pool, *,
          teacher: torch.Tensor | None = None) -> torch.Tensor:
    """B-1 one-token steps from the anchor tokens (n,) with first feature (n, H).

    positions, cache_loc: (n, B). teacher (n, B) forces the step inputs (training); without
    it each step reads the previous step's argmax. Returns logits (n, B-1, V).
    """
    eps = drafter.config.model.rms_norm_eps
    out = []
    for j in range(positions.shape[1] - 1):
        tok = teacher[:, j] if teacher is not None else tokens
        x = eagle_inputs(drafter, in_proj, target, tok, feature)[:, None]
        batch = ForwardBatch(positions[:, j : j + 1], cache_loc[:, j : j + 1], req_rows,
                             prefix_lens + j + 1)
        h = draft_stack(drafter, target, x, batch, req_to_token, k_pool, v_pool,
                        causal=True)[:, 0]
        feature = rms_norm(h, drafter.hidden_norm, eps)
        logits = target.logits(rms_norm(h, drafter.norm, eps))
        tokens = logits.argmax(dim=-1)
        out.append(logits)
    return torch.stack(out, dim=1)


class EagleProposer(DFlashProposer):
    """Runs the EAGLE-style chain in the engine; keeps each request's last target feature.

    Its graphs read buffers of its own (`_prev`, `in_proj`), so they are keyed by this object
    (Proposer's default), and its commit reads the candidates it kept at propose, so it stays
    out of the verify graph (as NoFeatureProposer's)."""

    commit_in_graph = False

    @property
    def graph_key(self) -> tuple:
        return (type(self), id(self))

    def __init__(self, drafter: Drafter, target: Target, in_proj: torch.Tensor,
                 block_size: int | None = None):
        super().__init__(drafter, target, block_size)
        self.in_proj = in_proj.to(device=target.device, dtype=target.dtype)

    def bind(self, target: Target, pool, graphs, *args) -> None:
        super().bind(target, pool, graphs, *args)
        shape = (pool.req_to_token.shape[0], self.drafter.fc.shape[1])
        prev = getattr(self, "_prev", None)
        if prev is not None and prev.shape == shape:
            prev.zero_()  # the same buffer: CUDA graphs captured earlier read it in place
        else:
            self._prev = torch.zeros(shape, dtype=target.dtype, device=target.device)

    def _context(self, ids, feats, positions, cache_loc, req_rows, kv_lens) -> None:
        x = eagle_inputs(self.drafter, self.in_proj, self.target, ids,
                         context_hidden(self.drafter, feats.flatten(0, 1)).view(
                             *feats.shape[:2], -1))
        draft_stack(self.drafter, self.target, x,
                    ForwardBatch(positions, cache_loc, req_rows, kv_lens),
                    self.pool.req_to_token, self.pool.draft_k, self.pool.draft_v, causal=True)

    def prefill(self, input_ids, batch: ForwardBatch, aux) -> None:
        bs = aux.shape[0]
        shifted = torch.cat([torch.zeros_like(aux[:, :1]), aux[:, :-1]], dim=1)
        self._context(input_ids, shifted, *batch)
        self._prev[batch.req_rows] = aux[torch.arange(bs, device=aux.device),
                                         batch.kv_lens - 1]

    def _draft(self, anchor, positions, cache_loc, req_rows, prefix_lens) -> torch.Tensor:
        g = context_hidden(self.drafter, self._prev[req_rows])
        logits = chain(self.drafter, self.in_proj, self.target, anchor, g, positions,
                       cache_loc, req_rows, prefix_lens, self.pool.req_to_token,
                       self.pool.draft_k, self.pool.draft_v)
        return torch.cat([anchor[:, None], logits.argmax(dim=-1)], dim=1)

    def propose(self, rnd: Round) -> Proposal:
        self._candidates = self.graphs.run(("eagle-draft", self.graph_key), self._draft,
                                           rnd.verified_id, rnd.positions, rnd.cache_loc,
                                           rnd.req_rows, rnd.prefix_lens).clone()
        return Proposal(self._candidates)

    def _commit(self, candidates, aux, positions, cache_loc, req_rows, prefix_lens,
                commit_lens) -> None:
        # Column j's input pairs its token with the feature of position j-1; columns past
        # commit_len are rewritten by the next round's chain before anything reads them.
        feats = torch.cat([self._prev[req_rows][:, None], aux[:, :-1]], dim=1)
        self._context(candidates, feats, positions, cache_loc, req_rows,
                      prefix_lens + self.block_size)
        last = aux[torch.arange(aux.shape[0], device=aux.device),
                   (commit_lens.long() - 1).clamp(min=0)]
        keep = (commit_lens > 0)[:, None]
        self._prev[req_rows] = torch.where(keep, last, self._prev[req_rows])

    def commit(self, rnd: Round, proposal, verified, accepted) -> None:
        self.graphs.run(("eagle-commit", self.graph_key), self._commit, self._candidates,
                        verified.aux, rnd.positions, rnd.cache_loc, rnd.req_rows,
                        rnd.prefix_lens, accepted.out.commit_lens)


@register("eagle")
def eagle(target, context, path, block_size=None):
    base = load_dflash(path, target, block_size=block_size)
    in_proj = read_safetensors(Path(path))["in_proj.weight"]
    return EagleProposer(base.drafter, target, in_proj, base.block_size)
