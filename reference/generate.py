"""`generate`: batched autoregressive or speculative decoding on the paged engine.

A batch of prompts is admitted into the KV pool (each request reserves prompt + 2B slots),
prefilled in one ragged forward, then decoded round by round. A speculative round runs
prepare_block -> propose -> verify (target forward over B tokens, capturing the proposer's
layers) -> accept (greedy accept_bonus or chain sampling) -> commit (DFlash: KV injection of
the committed columns), all on the device, then makes one host sync that reads the commit
lengths and tokens. The host appends them, cuts a request after its first stop token or at
max_new_tokens, frees its slots, and the others continue (the batch is re-packed only when
its membership changes). Slots are reserved to committed + 2B before each round and never
freed per round. Plain decoding (proposer=None) is the same loop with B = 1 and no draft.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from reference import ops
from reference.cuda_graphs import GraphCache, bucket
from reference.kv_pool import KVPool, KVShape
from reference.model import ForwardBatch, Target
from reference.proposers import Proposer, Round
from reference.verify import Sampling, sample, verify_greedy, verify_sampling

MEM_FRACTION = 0.85  # of device memory, for weights plus KV pool (SGLang's mem_fraction_static)
MIN_ROWS = 256  # request rows of a CUDA pool
PHASES = ("draft", "verify", "accept", "inject")


@dataclass
class GenerateOutput:
    """tokens: new tokens per request; accept_lengths: commit_len per round per request."""

    tokens: list[list[int]]
    accept_lengths: list[list[int]]
    stats: dict


@dataclass
class _Runtime:
    pool: KVPool
    graphs: GraphCache


@dataclass
class _Request:
    index: int
    prompt_len: int
    row: int
    tokens: list[int] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)
    done: bool = False

    @property
    def committed(self) -> int:
        """Tokens whose target KV is written: the prompt and all but the last new token."""
        return self.prompt_len + len(self.tokens) - 1


def runtime(target: Target, draft: KVShape | None, max_requests: int,
            context_len: int) -> _Runtime:
    """The target's pool and graphs, rebuilt only when they cannot hold this batch."""
    rt = target.runtime
    if rt is not None and rt.pool.can_hold(draft, max_requests, context_len):
        return rt
    if target.device.type == "cuda":  # rows are cheap; rebuilding loses the CUDA graphs
        max_requests = max(max_requests, MIN_ROWS)
    if rt is not None:
        rt.pool.close()
    target.runtime = rt = None
    shape = KVShape(target.config.num_layers, target.config.num_kv_heads, target.config.head_dim)
    if target.device.type == "cuda":
        torch.cuda.empty_cache()
        pool = KVPool.from_budget(MEM_FRACTION, max_requests, context_len, shape, draft,
                                  target.dtype, target.device)
    else:
        pool = KVPool(max_requests * context_len + 1, max_requests, context_len, shape, draft,
                      target.dtype, target.device)
    target.runtime = _Runtime(pool, GraphCache(target.device))
    return target.runtime


class _Clock:
    """Marks phase boundaries on the device timeline (CUDA events) or the host clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def intervals(self) -> list[float]:
        """Seconds between consecutive marks (call after the device is synchronized)."""
        pairs = zip(self.marks, self.marks[1:])
        if self.cuda:
            return [a.elapsed_time(b) / 1e3 for a, b in pairs]
        return [b - a for a, b in pairs]


class _Engine:
    """One generate() call: requests, device state of the running batch, and the stats."""

    def __init__(self, target: Target, prompts, proposer: Proposer | None, max_new: int,
                 sampling: Sampling, stop: set[int], seed: int):
        self.target, self.proposer, self.sampling = target, proposer, sampling
        self.max_new, self.stop = max_new, stop
        self.block = proposer.block_size if proposer else 1
        need = max(len(p) for p in prompts) + max_new + 2 * self.block
        self.rt = runtime(target, proposer.draft_kv if proposer else None,
                          bucket(len(prompts)), -(-need // 64) * 64)
        self.pool = self.rt.pool
        self.gen = torch.Generator(device=target.device).manual_seed(seed)
        self.times = dict.fromkeys((*PHASES, "host"), 0.0)
        self.rounds = 0
        self.reqs: list[_Request] = []
        try:
            for i, prompt in enumerate(prompts):
                self.reqs.append(_Request(i, len(prompt), self.pool.admit(len(prompt) +
                                                                          2 * self.block)))
        except Exception:
            self.release()
            raise
        if proposer is not None:
            proposer.bind(target, self.pool, self.rt.graphs)
            proposer.start([r.row for r in self.reqs], [r.index for r in self.reqs],
                           [r.prompt_len for r in self.reqs])
        self.live: list[_Request] = []

    def release(self) -> None:
        for r in self.reqs:
            if not r.done:
                self.pool.release(r.row)
                r.done = True

    def _append(self, r: _Request, new: list[int]) -> None:
        """Host-side finish: cut after the first stop token or at max_new_tokens."""
        for tok in new:
            r.tokens.append(tok)
            if tok in self.stop or len(r.tokens) >= self.max_new:
                self.pool.release(r.row)
                r.done = True
                return

    def prefill(self, prompts) -> None:
        dev, bs = self.target.device, len(prompts)
        lens = torch.tensor([len(p) for p in prompts], device=dev)
        width = int(lens.max())
        ids = torch.zeros(bs, width, dtype=torch.int64)
        for b, p in enumerate(prompts):
            ids[b, : len(p)] = torch.tensor(p)
        ids = ids.to(dev)
        rows = torch.tensor([r.row for r in self.reqs], device=dev)
        positions = torch.arange(width, device=dev).expand(bs, width)
        cache_loc = torch.where(positions < lens[:, None],
                                self.pool.req_to_token[rows, :width].long(), 0)
        batch = ForwardBatch(positions, cache_loc, rows, lens)
        capture = self.proposer.target_layer_ids if self.proposer else ()
        hidden, aux = self.target.forward(ids, batch, self.pool.req_to_token, self.pool.k,
                                          self.pool.v, capture=capture, fast=False)
        last = hidden[torch.arange(bs, device=dev), lens - 1]
        first = sample(self.target.logits(last), self.sampling, self.gen)
        if self.proposer is not None:
            self.proposer.prefill(ids, batch, aux)
        for r, tok in zip(self.reqs, first.tolist()):
            self._append(r, [tok])

    def _pack(self) -> None:
        """Device state of the live requests, padded to a CUDA-graph bucket with row 0."""
        self.live = [r for r in self.reqs if not r.done]
        bs, dev = len(self.live), self.target.device
        pad = [0] * (bucket(bs) - bs)

        def tensor(values):
            return torch.tensor(values + pad, dtype=torch.int64, device=dev)

        self.verified_id = tensor([r.tokens[-1] for r in self.live])
        self.prefix_lens = tensor([r.committed for r in self.live])
        self.req_rows = tensor([r.row for r in self.live])
        self.valid = tensor([1] * bs)

    def _decode_fn(self, ids, positions, cache_loc, req_rows, kv_lens):
        batch = ForwardBatch(positions, cache_loc, req_rows, kv_lens)
        hidden, _ = self.target.forward(ids, batch, self.pool.req_to_token, self.pool.k,
                                        self.pool.v)
        return self.target.logits(hidden[:, -1])

    def _verify_fn(self, candidates, positions, cache_loc, req_rows, kv_lens):
        batch = ForwardBatch(positions, cache_loc, req_rows, kv_lens)
        hidden, aux = self.target.forward(candidates, batch, self.pool.req_to_token,
                                          self.pool.k, self.pool.v,
                                          capture=self.proposer.target_layer_ids)
        return self.target.logits(hidden), aux

    def step(self) -> None:
        """One round (speculative) or one decode step (plain), then the host's bookkeeping."""
        start = time.perf_counter()
        if not self.live or any(r.done for r in self.live):
            self._pack()
        for r in self.live:
            self.pool.reserve(r.row, r.committed + 2 * self.block)
        clock = _Clock(self.target.device)
        clock.mark()
        block_ids, positions, cache_loc = ops.prepare_block(
            self.verified_id, self.prefix_lens, self.req_rows, self.pool.req_to_token,
            block_size=self.block, mask_token_id=self.proposer.mask_token_id
            if self.proposer else 0)
        kv_lens = self.prefix_lens + self.block
        if self.proposer is None:
            clock.mark()
            logits = self.rt.graphs.run(("decode",), self._decode_fn, block_ids, positions,
                                        cache_loc, self.req_rows, kv_lens)
            clock.mark()
            nxt = sample(logits, self.sampling, self.gen)
            commit = self.valid.to(torch.int32)
            out_tokens, bonus = nxt[:, None], nxt
            new_seq_lens = self.prefix_lens + 1
            clock.mark()
        else:
            rnd = Round(self.verified_id, self.prefix_lens, self.req_rows, block_ids, positions,
                        cache_loc)
            proposal = self.proposer.propose(rnd)
            clock.mark()
            logits, aux = self.rt.graphs.run(("verify", self.proposer.target_layer_ids),
                                             self._verify_fn, proposal.candidates, positions,
                                             cache_loc, self.req_rows, kv_lens)
            clock.mark()
            if self.sampling.greedy:
                res = verify_greedy(proposal.candidates, logits, self.prefix_lens)
            else:
                res = verify_sampling(proposal.candidates, logits, self.prefix_lens,
                                      self.sampling, self.gen, proposal.q)
            commit = res.commit_lens * self.valid.to(torch.int32)
            out_tokens, bonus, new_seq_lens = res.out_tokens, res.bonus, res.new_seq_lens
            clock.mark()
            self.proposer.commit(rnd, aux, commit)
        clock.mark()
        self.verified_id = bonus * self.valid
        self.prefix_lens = new_seq_lens * self.valid
        host = torch.cat([commit[:, None].long(), out_tokens], dim=1)[: len(self.live)].tolist()
        for r, (n, *toks) in zip(self.live, host):
            r.commits.append(n)
            self._append(r, toks[:n])
        for name, dt in zip(PHASES, clock.intervals()):
            self.times[name] += dt
        self.times["host"] += time.perf_counter() - start - sum(clock.intervals())
        self.rounds += 1


def generate(target: Target, prompts: list[list[int]], *, proposer: Proposer | None = None,
             max_new_tokens: int = 128, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, stop_token_ids=(), seed: int = 0) -> GenerateOutput:
    """Decode `prompts` with `target`, speculatively when a proposer is given.

    Returns the new tokens per request (cut after the first stop token or at
    max_new_tokens), the commit length of every round per request, and stats: rounds,
    prefill_s, decode_s, new_tokens, tokens_per_s (tokens after each request's first, which
    prefill samples, over decode_s), tau, the commit-length histogram and the time split
    per phase (draft, verify, accept, inject, host) in seconds, summed over rounds.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    sampling = Sampling(temperature, top_k, top_p)
    eng = _Engine(target, prompts, proposer, max_new_tokens, sampling, set(stop_token_ids), seed)
    try:
        with torch.inference_mode():
            t0 = time.perf_counter()
            eng.prefill(prompts)
            t1 = time.perf_counter()
            while any(not r.done for r in eng.reqs):
                eng.step()
            if target.device.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
    finally:
        eng.release()
    commits = [c for r in eng.reqs for c in r.commits]
    new_tokens = sum(len(r.tokens) for r in eng.reqs)
    stats = {
        "rounds": eng.rounds, "prefill_s": t1 - t0, "decode_s": t2 - t1,
        "new_tokens": new_tokens,
        "tokens_per_s": (new_tokens - len(prompts)) / max(t2 - t1, 1e-9),
        "tau": sum(commits) / max(len(commits), 1),
        "commit_hist": {n: commits.count(n) for n in sorted(set(commits))},
        **{f"{k}_s": v for k, v in eng.times.items()},
    }
    return GenerateOutput([r.tokens for r in eng.reqs], [r.commits for r in eng.reqs], stats)
