"""`PromptLookup`: prompt-lookup (n-gram) drafting, with no drafter model.

Each round the host matches the request's last tokens against its own prompt and output so
far and proposes the up to B - 1 tokens that followed the match (`spec.block_size` = B =
1 + num_speculative_tokens, as vLLM and SGLang name the n-gram drafter's setting). There is
no drafter: no draft GPU time, no draft weights, no draft KV pool. The target verifies B
tokens per request every round, found or not (a fixed-width verify, as a CUDA-graph engine
pads it; a miss commits only the bonus token), so a round's GPU time is that verify alone:
the target forward of B tokens per request and the LM head on all B rows. The match itself
is host work, `host_plan_s` = `host_per_req_s` seconds per request per round, added to the
engine's planning of the round.

Acceptance is a per-position survival curve through the usual `spec.acceptance` modes. For
`preset`, `PLACEHOLDER_TAU` stands in for a published tau: guessed values, not measurements,
a placeholder to be replaced by the curve measured with the reference engine's prompt lookup
on the toy world's held-out prompts (until then `spec.acceptance=replay` with that run's
`accept_lengths` as `spec.replay_path` uses such a measurement directly).
conf/spec/prompt_lookup.yaml gives the preset a flat curve per request (decay 0) and a wide
spread across requests: outputs that copy their prompt accept long runs, the rest almost none.
"""

from __future__ import annotations

from simulator.methods.base import SpecMethod, register

# {dataset: tau} at block size PLACEHOLDER_BLOCK, any model and temperature. Guesses [INF]:
# code (HumanEval) repeats its prompt's identifiers most, chat (MT-Bench) least.
PLACEHOLDER_TAU = {"humaneval": 2.0, "gsm8k": 1.8, "math500": 1.7, "mtbench": 1.5}
PLACEHOLDER_BLOCK = 8
HOST_PER_REQ_S = 2e-6  # suffix match over a request's tokens on the host [INF]


@register
class PromptLookup(SpecMethod):
    """Prompt-lookup (n-gram) drafting: zero draft GPU time, a verify of B tokens per request.

    Args:
        block_size: B, tokens verified per request per round (B - 1 drafted).
        host_per_req_s: host seconds of the n-gram match per request per round.
    """

    name = "prompt_lookup"

    def __init__(self, block_size: int = PLACEHOLDER_BLOCK,
                 host_per_req_s: float = HOST_PER_REQ_S):
        super().__init__(block_size)
        self.host_per_req_s = host_per_req_s

    @classmethod
    def published_tau(cls, model: str, dataset: str, temperature: float) -> tuple[float, int]:
        """The placeholder tau of `dataset` (see the module docstring), at B = 8."""
        return PLACEHOLDER_TAU[dataset], PLACEHOLDER_BLOCK

    def host_plan_s(self, n: int) -> float:
        return 0.0 if self.block_size == 1 else self.host_per_req_s * n
