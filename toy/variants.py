"""Ablation drafters of the paper's tables 9 and 10, as the toy world trains them.

`dflash_config.variant` in a drafter's config.json names one (absent: the full method):

- "no_features" (table 10): the context is the target's *embedding* of each context token
  (K = 1 feature, fc (H, H)), injected as K/V like the full method; no target layer is
  captured.
- "fusion" ("diffusion only", table 9): hidden_norm(fc(features)) of the context enters the
  draft stack as ordinary tokens (causal among themselves, through every layer's norms,
  attention and MLP) and blocks attend to the per-layer K/V this leaves, instead of the
  same features re-projected in every layer.
- "ar" ("injection only", DFlash-AR, table 9): KV injection as the full method, but causal
  attention inside the block, teacher-forced next-token training ([x_p .. x_{p+B-1}] in,
  output k predicts x_{p+k+1}) and B-1 sequential one-token draft steps.
- "eagle": the EAGLE-3-style autoregressive baseline (reference/methods/eagle.py).

The engine proposers live in reference/methods/ (variants.py, eagle.py); `load_variant(path,
target)` builds the one a folder's config names. toy/draft_model.py's `block_logits` runs
each variant's training forward.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from reference.methods import build
from reference.methods.variants import drafter_spec
from reference.model import Target
from reference.proposers import Proposer

VARIANTS = ("dflash", "no_features", "fusion", "ar", "eagle")


def context_features(variant: str, target: Target, ids: torch.Tensor,
                     captured: torch.Tensor | None) -> torch.Tensor:
    """What fc reads per context token: the target's embedding (no_features) or captured."""
    return target.embed[ids] if variant == "no_features" else captured


def variant_of(path: Path) -> str:
    cfg = json.loads((Path(path) / "config.json").read_text())
    variant = cfg.get("dflash_config", {}).get("variant", "dflash")
    if variant not in VARIANTS:
        raise ValueError(f"{path}/config.json: dflash_config.variant={variant!r} is not one "
                         f"of {VARIANTS}")
    return variant


def load_variant(path, target: Target, *, block_size: int | None = None) -> Proposer:
    """The proposer of the drafter folder `path`, whichever variant its config names."""
    options = {} if block_size is None else {"block_size": block_size}
    return build(drafter_spec(path, **options), target)
