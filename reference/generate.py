"""`generate`: batched decoding of a fixed set of prompts, a closed run of the serving loop.

Every prompt arrives at time 0 and is admitted at once; the prompts are prefilled in one
ragged forward, then decoded round by round by the one host loop (reference/serve/loop.py:
admission, KV reservation, stop and max-token cut, slot release). A round is
`Engine.round` (reference/engine.py): propose -> verify -> accept -> commit on the device,
each method filling in its stages (self-speculation proposes with the target itself). In
sync mode the host reads each round before launching the next; with `lookahead` it launches
round k+1 before reading round k (the serving loop's overlap mode), so host work hides
behind the device. Plain
decoding (proposer=None) is the same loop with B = 1 and no draft.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference.engine import PHASES
from reference.model import Target
from reference.proposers import Proposer
from reference.serve.loop import ServeConfig, Server
from reference.serve.workload import OpenLoop, make_requests
from reference.verify import Sampling


@dataclass
class GenerateOutput:
    """tokens: new tokens per request; accept_lengths: commit_len per round per request."""

    tokens: list[list[int]]
    accept_lengths: list[list[int]]
    stats: dict


def generate(target: Target, prompts: list[list[int]], *, proposer: Proposer | None = None,
             max_new_tokens: int = 128, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, stop_token_ids=(), seed: int = 0,
             lookahead: bool = False, check: bool = False) -> GenerateOutput:
    """Decode `prompts` with `target`, speculatively when a proposer is given.

    lookahead: launch each round before reading the previous one (overlap mode); the tokens
    are the same, and a request's round launched after its finish is dropped. check: assert
    slot ownership and the reservation bounds every round (syncs on CUDA; for tests).

    Returns the new tokens per request (cut after the first stop token or at
    max_new_tokens), the commit length of every round per request, and stats: rounds,
    prefill_s, decode_s, new_tokens, tokens_per_s (tokens after each request's first, which
    prefill samples, over decode_s), tau (pooled per round: committed tokens over request
    rounds), the commit-length histogram, the time split per phase (draft, verify, accept,
    inject, host) in seconds summed over rounds, the host's seconds to enqueue each phase
    (`<phase>_enqueue_s`, summed likewise), `round_times` (per round [live requests, wall
    seconds, *device seconds per phase]) and the method's own counters (`Proposer.stats`).
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    config = ServeConfig(mode="overlap" if lookahead else "sync", max_running=len(prompts),
                         prefill_budget=sum(len(p) for p in prompts),
                         stop_token_ids=tuple(stop_token_ids),
                         sampling=Sampling(temperature, top_k, top_p), seed=seed, check=check)
    server = Server(target, proposer, config, max(len(p) for p in prompts) + max_new_tokens)
    result = server.run(OpenLoop(make_requests(prompts, max_new_tokens)))
    return GenerateOutput(result.tokens, [lv.commits for lv in result.requests],
                          _stats(result, server, len(prompts)))


def _stats(result, server: Server, n_prompts: int) -> dict:
    s = result.stats
    # decoding starts once the host has read the (last) prefill step, in both modes: in
    # overlap mode the first round is launched before that, behind the prefill on the device
    decode_start = s["prefilled_s"] if s["prefilled_s"] is not None else s["wall_s"]
    decode_s = max(s["wall_s"] - decode_start, 0.0)
    spans = [d for d in result.timeline.device_spans() if d["kind"] == "decode"]
    walls = [w for kind, _, w in server.step_walls if kind == "decode"]
    round_times = [[d["bs"], wall, *(d["phases"].get(p, 0.0) for p in PHASES)]
                   for d, wall in zip(spans, walls)]
    times = {p: sum(r[2 + i] for r in round_times) for i, p in enumerate(PHASES)}
    times["host"] = sum(max(r[1] - sum(r[2:]), 0.0) for r in round_times)
    enqueue = {f"{p}_enqueue_s": sum(d["host_phases"].get(p, 0.0) for d in spans)
               for p in PHASES}
    commits = [c for lv in result.requests for c in lv.commits]
    new_tokens = s["output_tokens"]
    own = {k: v for k, v in s.items() if k in ("decode_tokens", "tested", "accepted",
                                                "acceptance", "trim_hist")}
    forwards = len(commits) * s.get("forwards_per_round", 1)
    return {
        "rounds": s["decode_rounds"], "prefill_s": decode_start, "decode_s": decode_s,
        "new_tokens": new_tokens,
        "tokens_per_s": (new_tokens - n_prompts) / max(decode_s, 1e-9),
        "tau": sum(commits) / max(len(commits), 1),
        "commit_hist": {n: commits.count(n) for n in sorted(set(commits))},
        **{f"{k}_s": v for k, v in times.items()},
        **enqueue,
        "round_times": round_times,
        "forwards": forwards,
        "tokens_per_forward": sum(commits) / max(forwards, 1),
        **own,
    }
