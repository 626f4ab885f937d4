"""Requests and their arrival processes; one random stream per source.

`Requests` is a struct of arrays over all requests of a run: the workload fills arrival time,
prompt and output lengths and the latent acceptance difficulty; the engine fills the records
(first token, finish, preemptions, rounds). Streams come from one `SeedSequence(seed)` spawned
into independent children (arrivals, prompt lengths, output lengths, difficulty, acceptance per
replica), so changing one distribution does not shift the others.

Arrival processes: `poisson` (exponential gaps), `gamma` (gaps with the given coefficient of
variation), `trace` (replay of a CSV or JSONL file with arrival_s, prompt_tokens,
output_tokens), and `closed_loop` (`concurrency` clients, each sending its next request
`think_time_s` after its previous one finished; arrival times are filled in as they happen).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.params import ConfigError, SimConfig, WorkloadParams

STREAMS = ("arrivals", "prompt", "output", "difficulty", "acceptance")


def make_streams(seed: int) -> dict[str, np.random.SeedSequence]:
    """One SeedSequence per random source."""
    return dict(zip(STREAMS, np.random.SeedSequence(seed).spawn(len(STREAMS)), strict=True))


@dataclass
class Requests:
    """All requests of a run (struct of arrays, indexed by request id)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    difficulty: np.ndarray
    replica: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    decode_rounds: np.ndarray
    committed_tokens: np.ndarray

    @classmethod
    def new(cls, arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
            difficulty: np.ndarray) -> Requests:
        n = len(prompt_tokens)
        return cls(
            arrival_s=np.asarray(arrival_s, dtype=np.float64),
            prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64),
            output_tokens=np.asarray(output_tokens, dtype=np.int64),
            difficulty=np.asarray(difficulty, dtype=np.float64),
            replica=np.full(n, -1, dtype=np.int64),
            first_token_s=np.full(n, np.nan),
            finish_s=np.full(n, np.nan),
            preemptions=np.zeros(n, dtype=np.int64),
            decode_rounds=np.zeros(n, dtype=np.int64),
            committed_tokens=np.zeros(n, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.prompt_tokens)


def _lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    if cv == 0:
        return np.full(n, mean)
    sigma2 = np.log1p(cv * cv)
    return rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), n)


def _lengths(w: WorkloadParams, streams, n: int) -> tuple[np.ndarray, np.ndarray]:
    rp = np.random.default_rng(streams["prompt"])
    ro = np.random.default_rng(streams["output"])
    prompt = np.maximum(1, np.rint(_lognormal(rp, w.prompt_tokens_mean, w.prompt_tokens_cv, n)))
    if w.output_dist == "exponential":
        out = ro.geometric(1.0 / w.output_tokens_mean, n)
    else:
        out = np.rint(_lognormal(ro, w.output_tokens_mean, w.output_tokens_cv, n))
    return prompt.astype(np.int64), np.clip(out, 1, w.max_new_tokens).astype(np.int64)


def _gaps(w: WorkloadParams, rng: np.random.Generator, n: int) -> np.ndarray:
    if w.arrival == "gamma":
        shape = 1.0 / (w.gamma_cv ** 2)
        return rng.gamma(shape, 1.0 / (shape * w.rate_rps), n)
    return rng.exponential(1.0 / w.rate_rps, n)


def _open_loop_arrivals(w: WorkloadParams, rng: np.random.Generator) -> np.ndarray:
    if w.duration_s is None:
        return np.cumsum(_gaps(w, rng, w.num_requests))
    chunks, t = [], 0.0
    while t <= w.duration_s:
        c = t + np.cumsum(_gaps(w, rng, max(1024, int(w.rate_rps * w.duration_s * 0.25))))
        chunks.append(c)
        t = c[-1]
    times = np.concatenate(chunks)
    return times[times <= w.duration_s]


def load_trace(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s, prompt_tokens, output_tokens) from a CSV with a header or a JSONL file."""
    p = Path(path)
    if p.suffix == ".jsonl":
        rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    else:
        with p.open(newline="") as f:
            rows = list(csv.DictReader(f))
    if not rows:
        raise ConfigError(f"workload.trace_path = {path!r} holds no requests")
    try:
        cols = [np.array([float(r[k]) for r in rows])
                for k in ("arrival_s", "prompt_tokens", "output_tokens")]
    except KeyError as e:
        raise ConfigError(f"workload.trace_path: column {e} missing") from e
    order = np.argsort(cols[0], kind="stable")
    return cols[0][order], cols[1][order].astype(np.int64), cols[2][order].astype(np.int64)


def make_requests(cfg: SimConfig, streams: dict[str, np.random.SeedSequence]) -> Requests:
    """The run's requests; closed-loop arrival times are NaN until issued."""
    w = cfg.workload
    if w.arrival == "trace":
        arrival, prompt, out = load_trace(w.trace_path)
        out = np.clip(out, 1, w.max_new_tokens)
        prompt = np.maximum(prompt, 1)
    elif w.arrival == "closed_loop":
        prompt, out = _lengths(w, streams, w.num_requests)
        arrival = np.full(w.num_requests, np.nan)
    else:
        arrival = _open_loop_arrivals(w, np.random.default_rng(streams["arrivals"]))
        prompt, out = _lengths(w, streams, len(arrival))
    z = np.random.default_rng(streams["difficulty"]).standard_normal(len(prompt))
    return Requests.new(arrival, prompt, out, z)
