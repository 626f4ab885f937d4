"""The drafter ablations of the DFlash paper's tables 9 and 10, as engine proposers.

- `no_features` (table 10): the context is the target's *embedding* of each context token
  (K = 1 feature, fc (H, H)), injected as K/V like the full method; no target layer is
  captured.
- `fusion` ("diffusion only", table 9): hidden_norm(fc(features)) of the context enters the
  draft stack as ordinary tokens (causal among themselves, through every layer's norms,
  attention and MLP) and blocks attend to the per-layer K/V this leaves, instead of the
  same features re-projected in every layer.
- `dflash_ar` ("injection only", DFlash-AR, table 9): KV injection as the full method, but
  causal attention inside the block and B-1 sequential one-token draft steps.

Each is stored like a DFlash drafter (config.json `dflash_config.variant` names it; the toy
world trains them, toy/variants.py) and takes the `dflash` method's `path` and `block_size`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from reference.methods.dflash import load_dflash
from reference.methods.dflash_drafter import DFlashProposer, Drafter, context_hidden, draft_stack
from reference.model import ForwardBatch, Target, rms_norm
from reference.proposers import Proposal, Round
from reference.registry import MethodSpec, register

# dflash_config.variant of a drafter folder -> its registered method
METHOD_OF_VARIANT = {"dflash": "dflash", "no_features": "no_features", "fusion": "fusion",
                     "ar": "dflash_ar", "eagle": "eagle"}


class NoFeatureProposer(DFlashProposer):
    """Injects the target embedding of every committed token; captures no target layer.
    Its commit reads the candidates it kept at propose, so it stays out of the verify graph."""

    commit_in_graph = False

    def __init__(self, drafter: Drafter, target: Target, block_size: int | None = None):
        super().__init__(drafter, target, block_size)
        self.target_layer_ids = ()

    def prefill(self, input_ids, batch: ForwardBatch, aux) -> None:
        super().prefill(input_ids, batch, self.target.embed[input_ids])

    def propose(self, rnd: Round) -> Proposal:
        self._candidates = super().propose(rnd).candidates.clone()
        return Proposal(self._candidates)

    def commit(self, rnd: Round, proposal, verified, accepted) -> None:
        # Committed columns hold the anchor and the accepted drafts: the target's tokens.
        super().commit(rnd, proposal, verified._replace(aux=self.target.embed[self._candidates]),
                       accepted)


class FusionProposer(DFlashProposer):
    """Runs the committed context through the draft layers (causal) instead of injecting."""

    def _context(self, aux, positions, cache_loc, req_rows, kv_lens) -> None:
        x = context_hidden(self.drafter, aux.flatten(0, 1)).view(*aux.shape[:2], -1)
        draft_stack(self.drafter, self.target, x,
                    ForwardBatch(positions, cache_loc, req_rows, kv_lens),
                    self.pool.req_to_token, self.pool.draft_k, self.pool.draft_v, causal=True)

    def prefill(self, input_ids, batch: ForwardBatch, aux) -> None:
        self._context(aux, *batch)

    def commit(self, rnd: Round, proposal, verified, accepted) -> None:
        # All B columns are written; those past commit_len sit where the next round's block
        # (prefix + commit_len onwards, B wide) writes before anything reads them.
        self.graphs.run(("fusion-context", self.graph_key), self._context, verified.aux,
                        rnd.positions, rnd.cache_loc, rnd.req_rows,
                        rnd.prefix_lens + self.block_size)


class ARProposer(DFlashProposer):
    """DFlash-AR: B-1 one-token draft steps, causal over the injected context and the block."""

    def _draft_ar(self, anchor, positions, cache_loc, req_rows, prefix_lens) -> torch.Tensor:
        """Drafts d_1..d_{B-1} (bs, B-1): step j reads token j (the anchor (bs,), then the
        previous draft) at positions[:, j] and sees the context and steps 0..j."""
        tok, drafts = anchor, []
        for j in range(self.block_size - 1):
            batch = ForwardBatch(positions[:, j : j + 1], cache_loc[:, j : j + 1], req_rows,
                                 prefix_lens + j + 1)
            x = draft_stack(self.drafter, self.target, self.target.embed[tok[:, None]], batch,
                            self.pool.req_to_token, self.pool.draft_k, self.pool.draft_v,
                            causal=True)
            h = rms_norm(x[:, -1], self.drafter.norm, self.drafter.config.model.rms_norm_eps)
            tok = self.target.logits(h).argmax(dim=-1)
            drafts.append(tok)
        return torch.stack(drafts, dim=1)

    def propose(self, rnd: Round) -> Proposal:
        drafts = self.graphs.run(("ar-draft", self.graph_key), self._draft_ar, rnd.verified_id,
                                 rnd.positions, rnd.cache_loc, rnd.req_rows, rnd.prefix_lens)
        # Out of the graph: its output lives in the graphs' shared pool, which the verify
        # graph overwrites before the candidates are read (reference/cuda_graphs.py).
        return Proposal(torch.cat([rnd.verified_id[:, None], drafts], dim=1))



def _variant(cls):
    def factory(target, context, path, block_size=None):
        base = load_dflash(path, target, block_size=block_size)
        return cls(base.drafter, target, base.block_size)
    return factory


register("no_features")(_variant(NoFeatureProposer))
register("fusion")(_variant(FusionProposer))
register("dflash_ar")(_variant(ARProposer))


def drafter_spec(path, **options) -> MethodSpec:
    """The method of the drafter folder `path` (its config's `dflash_config.variant`, absent
    for the full method), with `path` and the given options."""
    where = Path(path) / "config.json"
    try:
        variant = json.loads(where.read_text()).get("dflash_config", {}).get("variant",
                                                                              "dflash")
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{where}: cannot read the drafter config ({e})") from e
    if variant not in METHOD_OF_VARIANT:
        raise ValueError(f"{where}: dflash_config.variant={variant!r} is not one of "
                         f"{sorted(METHOD_OF_VARIANT)}")
    return MethodSpec.of(METHOD_OF_VARIANT[variant], path=str(path), **options)
