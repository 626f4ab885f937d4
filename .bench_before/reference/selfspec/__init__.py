"""Self-speculative decoding: the target drafts at MASK positions and verifies itself.

ISD (I-DLM introspective strided decoding, one causal forward of 2N-1 tokens per round) and
LinearSpec (Nemotron, a bidirectional draft forward and a causal verify forward per block),
both proposers that own their rounds, run by the one host loop like every other method.
"""

from reference.selfspec.base import RoundResult, SelfSpecMode
from reference.selfspec.isd import ISD, tpf_closed_form
from reference.selfspec.linearspec import TIERS, LinearSpec, select_block_size

__all__ = ["ISD", "TIERS", "LinearSpec", "RoundResult", "SelfSpecMode", "select_block_size",
           "tpf_closed_form"]
