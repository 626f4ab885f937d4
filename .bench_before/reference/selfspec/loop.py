"""Host loop of the self-speculative modes: one model drafts (at MASK positions) and verifies.

`generate_selfspec(target, prompts, mode)` admits the prompts into the engine's paged pool,
prefills them with `Engine.prefill` (which samples each request's first token), then runs
`mode.round` until every request has stopped. A mode (reference/selfspec/isd.py,
reference/selfspec/linearspec.py) keeps its per-request device state in arrays indexed by
the request's pool row, so finished requests leave the batch without any re-packing.

As in the rest of the engine, `prefix_len` counts the tokens whose KV is committed and the
last emitted token (`pending`, the anchor) has none yet. A round writes K/V for every query
token at positions prefix_len.., commits `n_out` of them (the advance), and trims the rest:
trimming is logical, as the slots stay reserved to committed + max_query and the next round
overwrites them before any query can see them (attention only reads keys < kv_lens).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import torch

from reference.device import to_device
from reference.engine import Engine, runtime
from reference.generate import GenerateOutput, RequestState
from reference.kv_pool import KVPool
from reference.model import ForwardBatch, Target
from reference.verify import Sampling


class RoundResult(NamedTuple):
    """One round of a mode for bs live requests, all (bs,) i64 unless noted.

    out_tokens (bs, W): the first n_out columns are the committed tokens (the last one is
    the next pending token); n_out: tokens committed = KV slots kept (the advance);
    written: KV slots written (query tokens), so trim = written - n_out; tested / accepted:
    drafts compared with the target and accepted (per-token acceptance = accepted / tested).
    """

    out_tokens: torch.Tensor
    n_out: torch.Tensor
    written: torch.Tensor
    tested: torch.Tensor
    accepted: torch.Tensor


class SelfSpecMode:
    """Base class of a self-speculative engine mode.

    Attributes:
        max_query: most query tokens per request in one round (KV slots reserved beyond the
            committed prefix).
        forwards_per_round: target forwards in one round (ISD 1, LinearSpec 2).
        mask_token_id: the MASK id fed at draft positions.
    """

    max_query: int = 1
    forwards_per_round: int = 1
    mask_token_id: int = 0

    def bind(self, target: Target, pool: KVPool, sampling: Sampling,
             gen: torch.Generator) -> None:
        """Called once per generate_selfspec with the pool, sampling and generator."""
        self.target, self.pool, self.sampling, self.gen = target, pool, sampling, gen

    def start(self, rows: torch.Tensor) -> None:
        """New requests got pool rows `rows` (bs,) i64: reset their state."""

    def round(self, rows: torch.Tensor, prefix_lens: torch.Tensor,
              pending: torch.Tensor) -> RoundResult:
        """One round for live requests at pool rows `rows`, committed KV lengths
        `prefix_lens` and last emitted tokens `pending`, all (bs,) i64."""
        raise NotImplementedError

    def forward(self, ids: torch.Tensor, rows: torch.Tensor, prefix_lens: torch.Tensor,
                causal: bool = True) -> torch.Tensor:
        """Target logits (bs, T, V) of ids (bs, T) at positions prefix_len + t; writes their
        K/V at those positions' slots and lets them see keys < prefix_len + T."""
        t = ids.shape[1]
        positions = prefix_lens[:, None] + torch.arange(t, device=ids.device)
        cache_loc = self.pool.req_to_token[rows].long().gather(1, positions)
        batch = ForwardBatch(positions, cache_loc, rows, prefix_lens + t)
        hidden, _ = self.target.forward(ids, batch, self.pool.req_to_token, self.pool.k,
                                        self.pool.v, causal=causal)
        return self.target.logits(hidden)


def generate_selfspec(target: Target, prompts: list[list[int]], mode: SelfSpecMode, *,
                      max_new_tokens: int = 128, temperature: float = 0.0, top_k: int = 0,
                      top_p: float = 1.0, stop_token_ids=(), seed: int = 0) -> GenerateOutput:
    """Decode `prompts` with a self-speculative `mode`; same output contract as `generate`.

    stats: rounds (of the batch), forwards (per request, summed), decode_tokens (committed by
    rounds, before the host's cut), tokens_per_forward = decode_tokens / forwards (TPF of one
    request), tau = mean n_out per request round, acceptance
    = accepted / tested drafts, trim_hist {trimmed slots: count}, decode_s.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    sampling, stop = Sampling(temperature, top_k, top_p), set(stop_token_ids)
    need = max(len(p) for p in prompts) + max_new_tokens + 2 * mode.max_query
    rt = runtime(target, None, len(prompts), -(-need // 64) * 64)
    pool, dev = rt.pool, target.device
    reqs: list[RequestState] = []
    totals = dict.fromkeys(("rounds", "decode_tokens", "tested", "accepted"), 0)
    trims: dict[int, int] = {}

    def append(r: RequestState, new: list[int]) -> None:
        for tok in new:
            r.tokens.append(tok)
            if tok in stop or len(r.tokens) >= max_new_tokens:
                pool.release(r.row)
                r.done = True
                return

    try:
        for i, p in enumerate(prompts):
            reqs.append(RequestState(i, len(p), pool.admit(len(p) + mode.max_query)))
        engine = Engine(target, None, rt, sampling, seed)
        mode.bind(target, pool, sampling, engine.gen)
        mode.start(to_device([r.row for r in reqs], dev))
        with torch.inference_mode():
            first = engine.prefill([r.row for r in reqs], prompts, [0] * len(prompts))
            for r, tok in zip(reqs, first.tolist()):
                append(r, [tok])
            t0 = time.perf_counter()
            while live := [r for r in reqs if not r.done]:
                pool.reserve_many([r.row for r in live],
                                  [r.committed + mode.max_query for r in live])
                res = mode.round(to_device([r.row for r in live], dev),
                                 to_device([r.committed for r in live], dev),
                                 to_device([r.tokens[-1] for r in live], dev))
                host = torch.cat([torch.stack([res.n_out, res.written, res.tested,
                                               res.accepted], 1), res.out_tokens], 1).tolist()
                for r, (n, written, tested, accepted, *toks) in zip(live, host):
                    r.commits.append(n)
                    trims[written - n] = trims.get(written - n, 0) + 1
                    totals["decode_tokens"] += n
                    totals["tested"] += tested
                    totals["accepted"] += accepted
                    append(r, toks[:n])
                totals["rounds"] += 1
            decode_s = time.perf_counter() - t0
    finally:
        for r in reqs:
            if not r.done:
                pool.release(r.row)
                r.done = True
    commits = [c for r in reqs for c in r.commits]
    forwards = len(commits) * mode.forwards_per_round  # per request, summed over requests
    stats = {**totals, "forwards": forwards, "decode_s": decode_s,
             "tokens_per_forward": totals["decode_tokens"] / max(forwards, 1),
             "tau": sum(commits) / max(len(commits), 1),
             "acceptance": totals["accepted"] / max(totals["tested"], 1),
             "trim_hist": dict(sorted(trims.items()))}
    return GenerateOutput([r.tokens for r in reqs], [r.commits for r in reqs], stats)
