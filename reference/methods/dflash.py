"""DFlash (chain): the block drafter with KV injection of reference/dflash.py.

Options: `path`, a z-lab drafter folder; or `random`, a drafter preset of
`reference.loaders.DFLASH_PRESETS` with random weights (timing runs); `block_size` B
(default: the drafter's); `seed` of the random weights; `weights_of`, a DFlash proposer
whose loaded drafter to share instead (programmatic: one set of weights, several B).
"""

from __future__ import annotations

from reference.dflash import DFlashProposer
from reference.loaders import load_dflash, random_dflash
from reference.registry import register


@register("dflash")
def dflash(target, context, path=None, random=None, block_size=None, seed=1, weights_of=None):
    if sum(x is not None for x in (path, random, weights_of)) != 1:
        raise ValueError("method 'dflash' needs exactly one of path=<drafter folder>, "
                         "random=<preset> or weights_of=<DFlash proposer>")
    if weights_of is not None:
        return DFlashProposer(weights_of.drafter, target, block_size=block_size)
    if random is not None:
        return random_dflash(random, target, block_size=block_size, seed=seed)
    return load_dflash(path, target, block_size=block_size)
