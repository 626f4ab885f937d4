"""I-DLM introspective strided decoding (ISD): one causal forward verifies and drafts.

docs/methods.md section 2.2. With stride N every forward carries
2N-1 query tokens per request, under strict causal attention and shifted logits (the logit at
position x scores the token at x+1):

    V (verify): [pending, s_0 .. s_{N-2}, MASK * (N-1)]
    C (cold):   [t0,      MASK * (2N-2)]          (only the first N-1 masks are used)

In V, the logits at pending, s_0, .., s_{N-3} give p for s_0 .. s_{N-2}; s_i is accepted with
probability min(1, p(s_i) / q(s_i)) (chain speculative sampling, reference/verify.py). If
all are accepted the logit at s_{N-2} gives the next clean token (the bonus) and the N-1 masks
propose the next round's drafts: N tokens out, KV advance N, trim N-1. A rejection at s_i
draws the correction from norm(max(0, p - q)), emits i+1 tokens (advance 1+i, trim 2N-2-i),
drops the drafts (they were conditioned on a rejected prefix) and sends the request to C.
In C the logit at t0 gives the clean token and masks 1..N-1 the drafts: 1 token, advance 1,
trim 2N-2. Expected tokens per forward for per-token acceptance p: `tpf_closed_form`.

Draft variants (`draft=`): "sample" draws s_i ~ q and verifies with q (exactly lossless);
"argmax" proposes argmax q and verifies it as a one-hot draft (accept with p(s), residual p
without s: also exactly lossless); "argmax_softmax_q" proposes argmax q but verifies with the
full softmax q, as I-DLM's T > 0 path reads: biased (tests/reference/test_selfspec_sampling.py).
At temperature 0 all three draft argmax q and accept exact matches.
"""

from __future__ import annotations

import torch

from reference.methods.selfspec_base import RoundResult, SelfSpecMode
from reference.proposers import Proposal
from reference.verify import sample, target_probs, verify_greedy, verify_sampling

DRAFTS = ("sample", "argmax", "argmax_softmax_q")


def tpf_closed_form(p: float, stride: int) -> float:
    """(2 + p + .. + p^{N-2}) / (2 - p^{N-1}): ISD tokens per forward at acceptance p."""
    return (2 + sum(p**k for k in range(1, stride - 1))) / (2 - p ** (stride - 1))


class ISD(SelfSpecMode):
    """ISD with stride N over the engine's pool.

    Per-row state (indexed by pool row): specs (R, N-1) i64, the drafts to verify next;
    q (R, N-1, V) fp32, their draft distributions (only when verification needs them);
    cold (R,) bool, no valid drafts (first round, or the last round rejected).
    """

    forwards_per_round = 1

    def __init__(self, stride: int, mask_token_id: int, draft: str = "sample"):
        if stride < 2:
            raise ValueError(f"stride N must be >= 2, got {stride}")
        if draft not in DRAFTS:
            raise ValueError(f"draft must be one of {DRAFTS}, got {draft!r}")
        self.n, self.mask_token_id, self.draft_mode = stride, mask_token_id, draft
        self.max_query = 2 * stride - 1

    @property
    def keeps_q(self) -> bool:
        return not self.sampling.greedy and self.draft_mode != "argmax"

    def bind(self, target, pool, graphs, *args) -> None:
        super().bind(target, pool, graphs, *args)
        rows, dev = pool.req_to_token.shape[0], target.device
        self.specs = torch.zeros(rows, self.n - 1, dtype=torch.int64, device=dev)
        self.cold = torch.ones(rows, dtype=torch.bool, device=dev)
        vocab = target.config.vocab_size if self.keeps_q else 0
        self.q = torch.zeros(rows, self.n - 1, vocab, dtype=torch.float32, device=dev)

    def reset(self, rows: torch.Tensor) -> None:
        self.cold[rows] = True

    def draft(self, mask_logits: torch.Tensor, rows: torch.Tensor,
              positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drafts (bs, N-1) i64 and their q (bs, N-1, V) fp32 or None (one-hot drafts).

        Args:
            mask_logits: (bs, N-1, V) logits of the N-1 used MASK positions.
            rows: (bs,) pool rows; positions: (bs, N-1) absolute positions of the drafts.
        """
        if self.sampling.greedy:
            return mask_logits.argmax(dim=-1), None
        q = target_probs(mask_logits, self.sampling)
        if self.draft_mode == "sample":
            drafts = torch.multinomial(q.flatten(0, 1), 1, generator=self.gen)
            return drafts.view(q.shape[:2]), q
        return q.argmax(dim=-1), (q if self.draft_mode == "argmax_softmax_q" else None)

    def propose(self, rnd) -> Proposal:
        """The forward's 2N-1 tokens: V [pending, s_0 .. s_{N-2}, MASK * (N-1)], or C."""
        n, rows = self.n, rnd.req_rows
        self._cold, self._specs = self.cold[rows], self.specs[rows]
        ids = rnd.block_ids.clone()  # [pending, MASK * (2N-2)]
        ids[:, 1:n] = torch.where(self._cold[:, None], self.mask_token_id, self._specs)
        return Proposal(ids)

    def judge(self, rnd, proposal, verified) -> RoundResult:
        n, rows, prefix_lens = self.n, rnd.req_rows, rnd.prefix_lens
        logits, cold = verified.logits, self._cold  # (bs, 2N-1, V)
        cand = torch.cat([rnd.verified_id[:, None], self._specs], dim=1)  # (bs, N)
        if self.sampling.greedy:
            res = verify_greedy(cand, logits[:, :n], prefix_lens)
        else:
            q = self.q[rows] if self.keeps_q else None
            res = verify_sampling(cand, logits[:, :n], prefix_lens, self.sampling, self.gen, q)
        clean_cold = sample(logits[:, 0], self.sampling, self.gen)  # C: token after t0
        self._accept = accept = torch.where(cold, 0, res.accept_lens.long())
        n_out = torch.where(cold, 1, res.commit_lens.long())
        out = res.out_tokens.clone()
        out[:, 0] = torch.where(cold, clean_cold, out[:, 0])
        tested = torch.where(cold, 0, (accept + 1).clamp(max=n - 1))
        return RoundResult(out, n_out, torch.full_like(n_out, 2 * n - 1), tested, accept)

    def commit(self, rnd, proposal, verified, accepted) -> None:
        """The next round's drafts from the used MASK positions, and the rows' state."""
        n, rows, logits, cold = self.n, rnd.req_rows, verified.logits, self._cold
        first = torch.where(cold, 1, n)  # the first used MASK position of the row's layout
        idx = first[:, None] + torch.arange(n - 1, device=rows.device)  # (bs, N-1)
        mask_logits = logits.gather(1, idx[..., None].expand(-1, -1, logits.shape[-1]))
        drafts, q_new = self.draft(mask_logits, rows, rnd.prefix_lens[:, None] + idx + 1)
        self.cold[rows] = ~cold & (self._accept < n - 1)
        self.specs[rows] = drafts
        if q_new is not None:
            self.q[rows] = q_new
