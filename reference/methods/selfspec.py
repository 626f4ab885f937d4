"""Self-speculation on the target itself: I-DLM ISD and Nemotron LinearSpec
(reference/methods/isd.py, linearspec.py, selfspec_base.py). Options: `mask_token_id`
(default: the last vocabulary id), `draft` (see each mode); ISD `stride` N; LinearSpec
`tiers` [[max_running_bs, B], ...] or a single `block_size` B."""

from __future__ import annotations

from reference.methods.isd import ISD
from reference.methods.linearspec import TIERS, LinearSpec
from reference.registry import register


@register("isd")
def isd(target, context, stride=4, mask_token_id=None, draft="sample"):
    mask = target.config.vocab_size - 1 if mask_token_id is None else mask_token_id
    return ISD(stride, mask, draft=draft)


@register("linearspec")
def linearspec(target, context, tiers=None, block_size=None, mask_token_id=None,
               draft="sample"):
    if tiers is not None and block_size is not None:
        raise ValueError("give tiers or block_size, not both")
    mask = target.config.vocab_size - 1 if mask_token_id is None else mask_token_id
    if block_size is not None:
        tiers = ((1 << 30, block_size),)
    return LinearSpec(mask, TIERS if tiers is None else tiers, draft=draft)
