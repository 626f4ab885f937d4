"""Plain autoregressive decoding: no proposer, one target forward per token (B = 1)."""

from __future__ import annotations

from reference.registry import register


@register("none")
def plain(target, context):
    return None
