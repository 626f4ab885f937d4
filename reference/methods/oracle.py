"""The oracle proposer: controlled acceptance without a trained drafter.

It drafts the target's own greedy continuation, precomputed by a plain run, and corrupts
drafted token j with probability 1 - s_j / s_{j-1}, so that the number of accepted drafts
follows a configured survival curve s_j = P(accept_len >= j). With a `shadow` (a real
proposer) the shadow's work runs every round and its drafts are discarded: the cost of that
method at the oracle's acceptance. Options: `tau` (a geometric curve of mean commit length
tau) or `survival` [s_1 .. s_{B-1}]; `block_size` B (default: the shadow's, else 16);
`plan`: draw each request's commit lengths from `common.survival.plan_rounds` (its
max_new_tokens - 1 commits at the curve's mean, in a plan seeded by (seed, request id); the
streams B - 1 tokens longer, so the last round drafts all it commits) instead of independently
per draft, so that the realized tau is the requested one (a request whose rounds leave the
plan's anchors, e.g. under a shorter verify block, takes the next planned length);
`verify_schedule`, drafts by batch size (`[lo, hi, K]` rows, `Proposer.verify_schedule`: a
shorter block keeps the curve's first entries); `seed`;
`shadow`: true for the build context's shared drafter, or a MethodSpec (or its text) built
for the same target; `streams`, the greedy continuations when already known (default: the
build context's, else a plain greedy run over its prompts).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from common.survival import geometric_survival, plan_rounds
from reference.device import to_device
from reference.generate import generate
from reference.kv_pool import KVPool
from reference.model import Target
from reference.proposers import Proposal, Proposer, Round, parse_verify_schedule
from reference.registry import FACTORIES, MethodSpec, register


class OracleProposer(Proposer):
    """Drafts streams[i] (request i's greedy continuation), corrupted to a survival curve.

    Args:
        streams: per request, the tokens a plain greedy run generated after its prompt.
        block_size: B.
        survival: s_1..s_{B-1}, non-increasing in [0, 1]; None means never corrupt.
        seed: seeds the corruption.
        plan: keep drafts 1..L-1 of the round at each planned anchor and corrupt draft L, L
            the plan's commit length (`plan_rounds` for min(plan_tokens, len(stream) - 1)
            commits), so the request's rounds commit the plan's lengths while its rounds
            follow the stream; the other drafts keep their independent draws.
        plan_tokens: the commits a request's plan covers (max_new_tokens - 1: the prefill
            samples the first token); None: len(stream) - 1.
        shadow: a real proposer whose work (draft forward, KV injection) runs every round
            and whose drafts are discarded: the cost of the method at oracle acceptance.
    """

    def __init__(self, streams: Sequence[Sequence[int]], block_size: int,
                 survival: Sequence[float] | None = None, seed: int = 0,
                 shadow: Proposer | None = None, plan: bool = False,
                 plan_tokens: int | None = None):
        if shadow is not None and shadow.block_size != block_size:
            raise ValueError(f"shadow block_size {shadow.block_size} != {block_size}")
        self.shadow = shadow
        if shadow is not None:
            self.mask_token_id = shadow.mask_token_id
            self.target_layer_ids, self.draft_kv = shadow.target_layer_ids, shadow.draft_kv
        survival = [1.0] * (block_size - 1) if survival is None else list(survival)
        if len(survival) != block_size - 1:
            raise ValueError(f"survival has {len(survival)} entries, expected B-1 = "
                             f"{block_size - 1}")
        self.survival = survival
        prev = 1.0
        self.keep_prob = []
        for s in survival:
            if not 0.0 <= s <= prev:
                raise ValueError(f"survival must be non-increasing in [0, 1], got {survival}")
            self.keep_prob.append(s / prev if prev > 0 else 0.0)
            prev = s
        self.streams, self.block_size, self.seed = [list(s) for s in streams], block_size, seed
        self.plan, self.plan_tokens = plan, plan_tokens

    def bind(self, target: Target, pool: KVPool, graphs, *args) -> None:
        super().bind(target, pool, graphs, *args)
        if self.shadow is not None:
            self.shadow.bind(target, pool, graphs, *args)
        device, rows = target.device, pool.req_to_token.shape[0]
        width = max([len(s) for s in self.streams] + [1])
        # drafts[row, g, j - 1]: the draft of generated token g when it sits at block
        # position j, corrupted once at start; a round gathers its block from it
        self._drafts = torch.zeros(rows, width, self.block_size - 1, dtype=torch.int64,
                                   device=device)
        self._prompt_len = torch.zeros(rows, dtype=torch.int64, device=device)
        self._cols = torch.arange(self.block_size - 1, device=device)
        self._keep = torch.tensor(self.keep_prob, dtype=torch.float32, device=device)
        self._gen = torch.Generator(device=device)
        self._gen.manual_seed(self.seed)

    def start(self, rows, request_ids, prompt_lens) -> None:
        """Corrupt each new request's stream for every block position (asynchronous: the
        serving loop calls this mid-flight). A round drafts generated token g at position j
        only once (its anchor is g - j), so each draft gets its own keep draw, as when it
        is drawn in the round."""
        _, width, cols = self._drafts.shape
        streams = torch.zeros(len(rows), width, dtype=torch.int64)
        for i, rid in enumerate(request_ids):
            streams[i, : len(self.streams[rid])] = torch.tensor(self.streams[rid],
                                                                dtype=torch.int64)
        device = self._drafts.device
        vocab = self.target.config.vocab_size
        kept = to_device(streams, device)[:, :, None].expand(-1, -1, cols)
        u = torch.rand(kept.shape, generator=self._gen, device=device)
        shift = torch.randint(1, max(vocab, 2), kept.shape, generator=self._gen, device=device)
        keep = u < self._keep
        if self.plan:
            planned = to_device(torch.stack([self._planned(rid, width)
                                             for rid in request_ids]), device)
            keep = torch.where(planned >= 0, planned > 0, keep)
        index = to_device(rows, device)
        self._drafts[index] = torch.where(keep, kept, (kept + shift) % vocab)
        self._prompt_len[index] = to_device(prompt_lens, device)

    def _planned(self, rid: int, width: int) -> torch.Tensor:
        """(width, B-1) i8 of request `rid`: 1 keep, 0 corrupt, -1 the independent draw, at
        [g, j - 1] (generated token g drafted at block position j, anchor a = g - j). The
        round at anchor a commits L(a) = the plan's length of its first round at or past a
        (a planned anchor: its own round's), so it keeps drafts j < L(a) and corrupts j = L(a)."""
        cols = self.block_size - 1
        out = torch.full((width, cols), -1, dtype=torch.int8)
        tokens = len(self.streams[rid]) - 1
        if self.plan_tokens is not None:
            tokens = min(tokens, self.plan_tokens)
        if tokens < 1:
            return out
        lengths = torch.tensor(plan_rounds(self.survival, tokens, (self.seed, rid)))
        anchors = torch.cumsum(lengths, 0) - lengths  # the planned rounds' anchors
        a = torch.arange(width)[:, None]
        j = torch.arange(1, cols + 1)[None, :]
        k = torch.searchsorted(anchors, torch.arange(width))[:, None]  # anchors below a
        length = lengths[k.clamp(max=len(lengths) - 1)]
        value = torch.where(j < length, 1, torch.where(j == length, 0, -1))
        value = torch.where(k < len(lengths), value, -1)
        g = a + j
        inside = (g < width).expand_as(value)
        out[g[inside], (j - 1).expand_as(value)[inside]] = value[inside].to(torch.int8)
        return out

    def prefill(self, input_ids, batch, aux) -> None:
        if self.shadow is not None:
            self.shadow.prefill(input_ids, batch, aux)

    @property
    def graph_key(self) -> tuple:
        """Its only graphed work is the shadow's (the engine's fused commit included)."""
        return (type(self), self.shadow.graph_key if self.shadow is not None else None)

    @property
    def commit_in_graph(self) -> bool:
        """Its commit is the shadow's (none without one)."""
        return self.shadow is None or self.shadow.commit_in_graph

    def commit(self, rnd: Round, proposal, verified, accepted) -> None:
        if self.shadow is not None:
            self.shadow.commit(rnd, proposal, verified, accepted)

    def propose(self, rnd: Round) -> Proposal:
        if self.shadow is not None:
            self.shadow.propose(rnd)
        bs = rnd.positions.shape[0]
        # Generated-token index of block position j: positions - prompt_len.
        index = rnd.positions[:, 1:] - self._prompt_len[rnd.req_rows][:, None]
        index = index.clamp_(0, self._drafts.shape[1] - 1)
        drafts = self._drafts[rnd.req_rows[:, None], index, self._cols[: index.shape[1]]]
        return Proposal(torch.cat([rnd.verified_id.view(bs, 1), drafts], dim=1))


@register("oracle")
def oracle(target, context, tau=None, survival=None, block_size=None, seed=0, shadow=None,
           streams=None, verify_schedule=None, plan=False):
    if tau is not None and survival is not None:
        raise ValueError("give tau or survival, not both")
    if shadow is True:
        if context.drafter is None:
            raise ValueError("method 'oracle': shadow=true needs a drafter in the BuildContext")
        shadow = context.drafter
    elif isinstance(shadow, str):
        shadow = MethodSpec.parse(shadow)
    if isinstance(shadow, MethodSpec):
        shadow = FACTORIES[shadow.name](target, context, **shadow.kwargs)
    block = block_size or (shadow.block_size if shadow is not None else 16)
    if tau is not None:
        survival = geometric_survival(tau, block)
    streams = streams if streams is not None else context.streams
    if streams is None:
        if not context.prompts:
            raise ValueError("method 'oracle' needs the prompts (BuildContext) or streams")
        streams = generate(target, [list(p) for p in context.prompts],
                           max_new_tokens=context.max_new_tokens + (block - 1) * plan).tokens
    proposer = OracleProposer(streams, block, survival, seed=seed, shadow=shadow, plan=plan,
                              plan_tokens=context.max_new_tokens - 1 if plan else None)
    proposer.verify_schedule = parse_verify_schedule(verify_schedule)
    return proposer
