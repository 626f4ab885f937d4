"""`generate`: batched autoregressive or speculative decoding on the paged engine.

A batch of prompts is admitted into the KV pool (each request reserves prompt + 2B slots),
prefilled in one ragged forward, then decoded round by round with `Engine.round`
(reference/engine.py: prepare_block -> propose -> verify -> accept -> commit, all on the
device), each round followed by one host sync that reads the commit lengths and tokens. The
host appends them, cuts a request after its first stop token or at max_new_tokens, frees its
slots, and the others continue (the batch is re-packed only when its membership changes).
Slots are reserved to committed + 2B before each round and never freed per round. Plain
decoding (proposer=None) is the same loop with B = 1 and no draft; with lookahead it reads
each step one step late, so the device runs the steps back to back. The continuous-batching
server (reference/serve/) runs the same rounds with arrivals, chunked prefill and overlap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from reference.cuda_graphs import bucket
from reference.device import Fence, Streams, to_device
from reference.engine import PHASES, Clock, DecodeBatch, Engine, Runtime, runtime
from reference.model import Target
from reference.proposers import Proposer
from reference.serve.relay import HostResult, ResultCopy
from reference.verify import Sampling

_Runtime = Runtime  # the name tests/reference/test_generate.py builds pools with


@dataclass
class GenerateOutput:
    """tokens: new tokens per request; accept_lengths: commit_len per round per request."""

    tokens: list[list[int]]
    accept_lengths: list[list[int]]
    stats: dict


@dataclass
class RequestState:
    """Host state of one request of a decode loop (generate, reference/selfspec/loop.py)."""

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


class _Engine:
    """One generate() call: requests, device state of the running batch, and the stats."""

    def __init__(self, target: Target, prompts, proposer: Proposer | None, max_new: int,
                 sampling: Sampling, stop: set[int], seed: int, lookahead: bool = False):
        self.target, self.proposer = target, proposer
        self.max_new, self.stop = max_new, stop
        self.pending: tuple | None = None  # a launched step not read yet (lookahead)
        self.block = proposer.block_size if proposer else 1
        # lookahead: each step's results go to pinned memory as it is launched (the serving
        # loop's ResultCopy), so a read waits for that copy, not for the step queued after it
        self.copies = (ResultCopy(Streams(target.device), target.device, bucket(len(prompts)),
                                  1 + self.block) if lookahead else None)
        need = max(len(p) for p in prompts) + max_new + 2 * self.block
        rt = runtime(target, proposer.draft_kv if proposer else None, bucket(len(prompts)),
                     -(-need // 64) * 64)
        self.pool = rt.pool
        self.times = dict.fromkeys((*PHASES, "host"), 0.0)
        self.round_times: list[list[float]] = []
        self.rounds = 0
        self.reqs: list[RequestState] = []
        try:
            for i, prompt in enumerate(prompts):
                self.reqs.append(RequestState(i, len(prompt), self.pool.admit(len(prompt) +
                                                                          2 * self.block)))
        except Exception:
            self.release()
            raise
        self.engine = Engine(target, proposer, rt, sampling, seed)
        if proposer is not None:
            proposer.start([r.row for r in self.reqs], [r.index for r in self.reqs],
                           [r.prompt_len for r in self.reqs])
        self.live: list[RequestState] = []

    def release(self) -> None:
        for r in self.reqs:
            if not r.done:
                self.pool.release(r.row)
                r.done = True

    def _append(self, r: RequestState, new: list[int]) -> None:
        """Host-side finish: cut after the first stop token or at max_new_tokens."""
        for tok in new:
            r.tokens.append(tok)
            if tok in self.stop or len(r.tokens) >= self.max_new:
                self.pool.release(r.row)
                r.done = True
                return

    def prefill(self, prompts) -> None:
        first = self.engine.prefill([r.row for r in self.reqs], prompts, [0] * len(prompts))
        for r, tok in zip(self.reqs, first.tolist()):
            self._append(r, [tok])

    def _pack(self) -> None:
        """Device state of the live requests, padded to a CUDA-graph bucket with row 0."""
        self.live = [r for r in self.reqs if not r.done]
        bs, dev = len(self.live), self.target.device
        pad = [0] * (bucket(bs) - bs)

        def tensor(values):
            return to_device(values + pad, dev)

        self.verified_id = tensor([r.tokens[-1] for r in self.live])
        self.prefix_lens = tensor([r.committed for r in self.live])
        self.req_rows = tensor([r.row for r in self.live])
        self.valid = tensor([1] * bs)

    def step(self) -> None:
        """One round (speculative) or one decode step (plain), then the host's bookkeeping.

        With lookahead the host reads each step only after launching the next one, so the
        device runs the steps back to back; the next step's inputs are the last one's device
        outputs. Each step's results are staged in pinned memory as it is launched, so the
        read waits for that copy, not for the step queued after it. The batch is re-packed
        only after the pending step is read.
        """
        start = time.perf_counter()
        if not self.live or any(r.done for r in self.live):
            self.drain()
            if all(r.done for r in self.reqs):
                return
            self._pack()
        self.pool.reserve_many([r.row for r in self.live],
                               [r.committed + 2 * self.block for r in self.live])
        clock = Clock(self.target.device)
        clock.mark()
        out = self.engine.round(DecodeBatch(self.verified_id, self.prefix_lens, self.req_rows,
                                            self.valid), clock)
        self.verified_id, self.prefix_lens = out.bonus, out.new_seq_lens
        host = torch.cat([out.commit_lens[:, None].long(), out.out_tokens], dim=1)
        if self.copies is None:
            self._read(self.live, host, clock, start)
            return
        host = self.copies.start(host, Fence(self.target.device.type == "cuda").record())
        launched, self.pending = self.pending, (self.live, host, clock, start)
        if launched is not None:
            self._read(*launched)

    def drain(self) -> None:
        """Read the pending step, if any (lookahead)."""
        if self.pending is not None:
            launched, self.pending = self.pending, None
            self._read(*launched)

    def _read(self, live: list[RequestState], host: torch.Tensor | HostResult, clock: Clock,
              start: float) -> None:
        """Wait for one step's results (a device tensor, or its copy in flight to the host
        with lookahead), append them, account its time. A request already finished ignores
        the step launched before its finish was read (lookahead)."""
        values = host.wait() if isinstance(host, HostResult) else host.tolist()
        for r, (n, *toks) in zip(live, values[: len(live)]):
            if not r.done:
                r.commits.append(n)
                self._append(r, toks[:n])
        phases = clock.intervals()
        for name, dt in zip(PHASES, phases):
            self.times[name] += dt
        wall = time.perf_counter() - start
        self.times["host"] += max(wall - sum(phases), 0.0)
        self.round_times.append([len(live), wall, *phases])
        self.rounds += 1


def generate(target: Target, prompts: list[list[int]], *, proposer: Proposer | None = None,
             max_new_tokens: int = 128, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, stop_token_ids=(), seed: int = 0,
             lookahead: bool = False) -> GenerateOutput:
    """Decode `prompts` with `target`, speculatively when a proposer is given.

    lookahead (plain decoding only): launch each step before reading the previous one, so
    the host's bookkeeping hides behind the device (the serving loop's overlap, reference/
    serve/, does this for every proposer). The tokens are the same; a request's step
    launched after its finish is dropped. A round's wall time then spans two launches.

    Returns the new tokens per request (cut after the first stop token or at
    max_new_tokens), the commit length of every round per request, and stats: rounds,
    prefill_s, decode_s, new_tokens, tokens_per_s (tokens after each request's first, which
    prefill samples, over decode_s), tau, the commit-length histogram and the time split
    per phase (draft, verify, accept, inject, host) in seconds, summed over rounds, and
    `round_times`: per round [live requests, wall seconds, *device seconds per phase].
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if lookahead and proposer is not None:
        raise ValueError("lookahead is for plain decoding; the serving loop's overlap mode "
                         "(reference/serve/) pipelines speculative rounds")
    sampling = Sampling(temperature, top_k, top_p)
    eng = _Engine(target, prompts, proposer, max_new_tokens, sampling, set(stop_token_ids), seed,
                  lookahead)
    try:
        with torch.inference_mode():
            t0 = time.perf_counter()
            eng.prefill(prompts)
            t1 = time.perf_counter()
            while any(not r.done for r in eng.reqs):
                eng.step()
            eng.drain()
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
        "round_times": eng.round_times,
    }
    return GenerateOutput([r.tokens for r in eng.reqs], [r.commits for r in eng.reqs], stats)
