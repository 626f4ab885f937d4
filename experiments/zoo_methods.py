"""Registered methods side by side on the zoo target's committed held-out test prompts (CPU).

`compare(zoo, methods, num_prompts, max_new_tokens)` decodes the first N prompts of the
committed test set (up to max_new_tokens or the end-of-text token; greedy, or sampled at
`temperature`) with plain decoding and then with each method, built through the registry,
and returns one row per method: tau (mean commit length per round, pooled over rounds)
with 2 SE over requests, the paired difference to the first method with its 2 SE (same
prompts), tau on the low-repetition stratum with its count, tau by the output position
where a round starts ([0, 64) and [64, max_new_tokens): length effects), the outputs' repetition,
whether every output equals plain decoding (meaningful when greedy), the wall time, and the
commit lengths per request.
`table` renders the rows. Used by experiments/prompt_lookup.py and tree_budget.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from experiments.acceptance_stats import (
    LOW_REPETITION,
    low_repetition_tau,
    paired_difference,
    pooled_tau,
    position_tau,
    repetition_rate,
    tau_standard_error,
)
from reference.generate import generate
from reference.loaders import load_target
from reference.methods import MethodSpec, build
from toy.eval_sets import held_out_prompts
from toy.tokenizer import EOT, load_tokenizer

ZOO = Path("experiments/zoo")


def compare(zoo: Path, methods: dict[str, MethodSpec], num_prompts: int,
            max_new_tokens: int, *, temperature: float = 0.0, device: str = "cpu",
            seed: int = 0) -> list[dict]:
    """One row per method (labels as the dict's keys), in order (module docstring)."""
    target = load_target(zoo / "target", device=device, dtype=torch.float32)
    tok_path = zoo / "tokenizer" / "tokenizer.json"
    prompts = held_out_prompts(tok_path, "test", num_prompts)
    kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
              stop_token_ids=(load_tokenizer(tok_path).token_to_id(EOT),))
    plain = generate(target, prompts, **kw) if temperature <= 0 else None
    rows = []
    for label, spec in methods.items():
        start = time.perf_counter()
        out = generate(target, prompts, proposer=build(spec, target), **kw)
        low = low_repetition_tau(out.accept_lengths, out.tokens)
        early, late = position_tau(out.accept_lengths, ((0, 64), (64, max_new_tokens)))
        rows.append({"method": label, "spec": str(spec), "tau": pooled_tau(out.accept_lengths),
                     "tau_2se": 2 * tau_standard_error(out.accept_lengths),
                     "low_rep_tau": low["tau"], "low_rep_2se": 2 * low["tau_se"],
                     "low_rep_requests": low["requests"], "requests": len(prompts),
                     "pos_tau": [early["tau"], late["tau"]],
                     "pos_2se": [2 * early["tau_se"], 2 * late["tau_se"]],
                     "repetition": repetition_rate(out.tokens),
                     # sampled runs draw other random numbers than plain sampling: their
                     # losslessness is the sampling tests' (tests/reference), not equality
                     "lossless": out.tokens == plain.tokens if temperature <= 0 else None,
                     "wall_s": time.perf_counter() - start,
                     "accept_lengths": out.accept_lengths})
        first = [(sum(a), len(a)) for a in rows[0]["accept_lengths"]]
        mine = [(sum(a), len(a)) for a in out.accept_lengths]
        rows[-1]["diff_vs_first"] = rows[-1]["tau"] - rows[0]["tau"]
        rows[-1]["diff_2se"] = 2 * paired_difference(mine, first)[2]
        print(f"{label}: tau {rows[-1]['tau']:.3f}", flush=True)
    return rows


def table(rows: list[dict], num_prompts: int, max_new_tokens: int,
          baseline: bool = False, temperature: float = 0.0, pair: Path = ZOO) -> str:
    """Markdown: the setting, then one line per row (with tau over the first row's and the
    paired difference to it if `baseline`)."""
    how = "greedy" if temperature <= 0 else f"sampled at T = {temperature:g}"
    lines = [f"Target of `{pair.as_posix()}`, first {num_prompts} prompts of the committed test "
             f"set, {how}, "
             f"<= {max_new_tokens} new tokens. tau = mean commit length per round, "
             f"pooled over rounds; low repetition = outputs with 4-gram repetition < "
             f"{LOW_REPETITION}.", "",
             "| method | tau ± 2 SE |"
             + (" vs first | paired diff ± 2 SE |" if baseline else "")
             + f" low-repetition tau ± 2 SE (requests) | tau [0, 64) | tau [64, {max_new_tokens})"
             " | lossless | wall s |",
             "| --- | --- |" + (" --- | --- |" if baseline else "") + " --- | --- | --- | --- |"
             " --- |"]
    for r in rows:
        extra = (f" {r['tau'] / rows[0]['tau']:.2f}x | {r['diff_vs_first']:+.2f} ± "
                 f"{r['diff_2se']:.2f} |") if baseline else ""
        lines.append(f"| {r['method']} | {r['tau']:.2f} ± {r['tau_2se']:.2f} |{extra} "
                     f"{r['low_rep_tau']:.2f} ± {r['low_rep_2se']:.2f} "
                     f"({r['low_rep_requests']} of {r['requests']}) | "
                     + " | ".join(f"{t:.2f} ± {e:.2f}" for t, e in zip(r["pos_tau"], r["pos_2se"]))
                     + f" | {'n/a' if r['lossless'] is None else r['lossless']} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"
