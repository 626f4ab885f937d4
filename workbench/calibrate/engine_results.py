"""An engine's own benchmark output, read as runs the simulator can replay.

Formats (`read(path) -> list[BenchRun]`):

- `sglang.bench_serving --output-file F.jsonl`: one JSON object per line, one run each.
  Fields read: `max_concurrency` (clients of the closed loop), `completed` (requests
  finished: the run's request count), `total_input_tokens`, `total_output_tokens` (mean
  prompt and output lengths = totals / completed), `output_throughput` (output tok/s over
  the benchmark's duration), and `accept_length` (mean committed tokens per request round
  of a speculative run; absent or null for plain decoding).
- `vllm bench serve --save-result` (`--result-filename F.json`): one JSON object. Fields
  read: the same `max_concurrency`, `completed`, `total_input_tokens`,
  `total_output_tokens`, `output_throughput`, and `spec_decode_acceptance_length` (present
  when the server speculates).

A file of neither format, or a run without a field it needs, is a `ResultError` whose one
line names the file and the field. A run with `max_concurrency` null (an open-loop rate
run) cannot be replayed as a closed loop and is an error too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

COMMON = ("max_concurrency", "completed", "total_input_tokens", "total_output_tokens",
          "output_throughput")
TAU = {"sglang": "accept_length", "vllm": "spec_decode_acceptance_length"}


class ResultError(ValueError):
    """A result file that cannot be read as a run: the message names the file and field."""


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run: closed loop of `concurrency` clients over `requests` requests,
    mean lengths in tokens, measured output tok/s, tau (None: plain decoding)."""

    path: str
    engine: str
    concurrency: int
    requests: int
    prompt_tokens: float
    output_tokens: float
    output_tok_s: float
    tau: float | None

    @property
    def speculative(self) -> bool:
        return self.tau is not None


def _run(path: Path, engine: str, d: dict, where: str) -> BenchRun:
    for key in COMMON:
        if d.get(key) is None:
            raise ResultError(f"{path}{where}: missing field {key!r} ({engine} result)")
    n = int(d["completed"])
    if n <= 0:
        raise ResultError(f"{path}{where}: field 'completed' is {n}: no finished request")
    tau = d.get(TAU[engine])
    return BenchRun(str(path), engine, int(d["max_concurrency"]), n,
                    float(d["total_input_tokens"]) / n, float(d["total_output_tokens"]) / n,
                    float(d["output_throughput"]), None if tau is None else float(tau))


def _engine(d: dict) -> str | None:
    if "accept_length" in d or ("backend" in d and "model_id" not in d):
        return "sglang"
    if "model_id" in d or "spec_decode_acceptance_length" in d:
        return "vllm"
    return None


def read(path: str | Path) -> list[BenchRun]:
    """Every run of one result file (module docstring: formats and fields)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ResultError(f"{path}: cannot read ({e.strerror})") from None
    try:
        docs = [json.loads(text)]
        where = [""]
    except json.JSONDecodeError:
        lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        try:
            docs = [json.loads(ln) for _, ln in lines]
        except json.JSONDecodeError:
            raise ResultError(f"{path}: neither a JSON object (vllm bench serve "
                              "--save-result) nor JSON lines (sglang.bench_serving)") from None
        where = [f" line {i}" for i, _ in lines]
    if not docs:
        raise ResultError(f"{path}: no runs")
    runs = []
    for d, w in zip(docs, where, strict=True):
        if not isinstance(d, dict):
            raise ResultError(f"{path}{w}: not a JSON object")
        engine = _engine(d)
        if engine is None:
            raise ResultError(f"{path}{w}: missing field 'backend' or 'model_id' (not a "
                              "sglang.bench_serving or vllm bench serve result)")
        runs.append(_run(path, engine, d, w))
    return runs
