"""Self-speculative decoding: the target drafts at MASK positions and verifies itself.

ISD (I-DLM introspective strided decoding, one causal forward of 2N-1 tokens per round) and
LinearSpec (Nemotron, a bidirectional draft forward and a causal verify forward per block),
both driven by `generate_selfspec` over the engine's paged pool.
"""

from reference.selfspec.isd import ISD, tpf_closed_form
from reference.selfspec.linearspec import TIERS, LinearSpec, select_block_size
from reference.selfspec.loop import RoundResult, SelfSpecMode, generate_selfspec

__all__ = ["ISD", "TIERS", "LinearSpec", "RoundResult", "SelfSpecMode", "generate_selfspec",
           "select_block_size", "tpf_closed_form"]
