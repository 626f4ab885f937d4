"""DFlash (chain): the block drafter with KV injection of reference/methods/dflash_drafter.py.

Options: `path`, a z-lab drafter folder; or `random`, a drafter preset of
`reference.loaders.DFLASH_PRESETS` with random weights (timing runs); `block_size` B
(default: the drafter's); `seed` of the random weights; `weights_of`, a DFlash proposer
whose loaded drafter to share instead (programmatic: one set of weights, several B);
`tree_budget` N verifies a tree of N nodes per round instead of the chain, with
`tree_top_k` candidates per depth (reference/methods/dflash_tree.py); `verify_schedule`, the chain's
drafts by batch size, `[lo, hi, K]` rows (e.g. [[1,15,15],[16,1024,9]]: 9 drafts, a block
of 10, from 16 live requests; `Proposer.verify_schedule`).
"""

from __future__ import annotations

from pathlib import Path

from reference.config import DFlashConfig
from reference.loaders import _read_json, read_safetensors
from reference.methods.dflash_drafter import (
    DFlashProposer,
    drafter_from_state_dict,
    random_dflash,
)
from reference.methods.dflash_tree import DFlashTreeProposer
from reference.model import Target
from reference.proposers import parse_verify_schedule
from reference.registry import register


@register("dflash")
def dflash(target, context, path=None, random=None, block_size=None, seed=1, weights_of=None,
           tree_budget=None, tree_top_k=4, verify_schedule=None):
    if sum(x is not None for x in (path, random, weights_of)) != 1:
        raise ValueError("method 'dflash' needs exactly one of path=<drafter folder>, "
                         "random=<preset> or weights_of=<DFlash proposer>")
    if weights_of is not None:
        chain = DFlashProposer(weights_of.drafter, target, block_size=block_size)
    elif random is not None:
        chain = random_dflash(random, target, block_size=block_size, seed=seed)
    else:
        chain = load_dflash(path, target, block_size=block_size)
    if tree_budget is None:
        chain.verify_schedule = parse_verify_schedule(verify_schedule)
        return chain
    if verify_schedule is not None:
        raise ValueError("method 'dflash': verify_schedule (the chain's drafts by batch size) "
                         "does not apply to a tree (tree_budget)")
    return DFlashTreeProposer(chain.drafter, target, chain.block_size, tree_budget, tree_top_k)


def load_dflash(path, target: Target, *, block_size: int | None = None,
                tree_budget: int | None = None) -> DFlashProposer:
    """Load a z-lab DFlash drafter directory for `target`; returns its proposer, which
    verifies a tree of `tree_budget` nodes (anchor included) per round when given
    (reference/methods/dflash_tree.py; top-4 candidates per depth), else the chain."""
    directory = Path(path)
    where = f"{directory}/config.json"
    cfg = DFlashConfig.from_dict(_read_json(directory / "config.json", "drafter config"),
                                 target.config, block_size, where)
    drafter = drafter_from_state_dict(cfg, read_safetensors(directory), target, str(directory))
    if tree_budget is not None:
        return DFlashTreeProposer(drafter, target, cfg.block_size, tree_budget)
    return DFlashProposer(drafter, target, block_size=cfg.block_size)
