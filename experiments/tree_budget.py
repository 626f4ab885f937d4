"""`python -m experiments.tree_budget [--num-prompts N] [--budgets 16,32,64] [--out DIR]`:
tau against the tree's node budget for the zoo pair (DFlash B = 16), next to the chain.

Every method is built through the registry and decodes the first N prompts of the committed
test set (experiments/zoo/prompts) greedily, up to --max-new-tokens new tokens or the
end-of-text token: the chain, then trees of each budget (top-4 candidates per depth,
reference/dflash_tree.py). For each: tau (mean commit length per round, pooled over rounds)
with 2 SE over requests, tau on the low-repetition stratum with its count, the ratio to the
chain's tau, and whether every output equals plain greedy decoding. Writes results.md and
results.json. CPU, fp32; minutes at the default size.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from experiments.acceptance_stats import (
    LOW_REPETITION,
    low_repetition_tau,
    pooled_tau,
    repetition_rate,
    tau_standard_error,
)
from reference.generate import generate
from reference.loaders import load_target
from reference.methods import MethodSpec, build
from reference.methods.variants import drafter_spec
from toy.eval_sets import held_out_prompts
from toy.tokenizer import EOT, load_tokenizer

ZOO = Path("experiments/zoo")


def methods(zoo: Path, budgets: list[int]) -> dict[str, MethodSpec]:
    chain = drafter_spec(zoo / "dflash-b16")
    return {"chain (B = 16)": chain,
            **{f"tree N = {n}": chain.with_options(tree_budget=n, tree_top_k=4)
               for n in budgets}}


def run(args) -> dict:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    target = load_target(args.zoo / "target", device="cpu", dtype=torch.float32)
    tok_path = args.zoo / "tokenizer" / "tokenizer.json"
    prompts = held_out_prompts(tok_path, "test", args.num_prompts)
    kw = dict(max_new_tokens=args.max_new_tokens,
              stop_token_ids=(load_tokenizer(tok_path).token_to_id(EOT),))
    plain = generate(target, prompts, **kw)
    rows = []
    for label, spec in methods(args.zoo, [int(b) for b in args.budgets.split(",")]).items():
        start = time.perf_counter()
        out = generate(target, prompts, proposer=build(spec, target), **kw)
        low = low_repetition_tau(out.accept_lengths, out.tokens)
        rows.append({"method": label, "spec": str(spec), "tau": pooled_tau(out.accept_lengths),
                     "tau_2se": 2 * tau_standard_error(out.accept_lengths),
                     "low_rep_tau": low["tau"], "low_rep_2se": 2 * low["tau_se"],
                     "low_rep_requests": low["requests"], "requests": len(prompts),
                     "repetition": repetition_rate(out.tokens),
                     "lossless": out.tokens == plain.tokens,
                     "wall_s": time.perf_counter() - start})
        rows[-1]["vs_chain"] = rows[-1]["tau"] / rows[0]["tau"]
        print(f"{label}: tau {rows[-1]['tau']:.3f}", flush=True)
    return {"rows": rows}


def markdown(rows: list[dict], args) -> str:
    lines = [f"Zoo target, first {args.num_prompts} prompts of the committed test set, greedy, "
             f"<= {args.max_new_tokens} new tokens. tau = mean commit length per round, "
             f"pooled over rounds; low repetition = outputs with 4-gram repetition < "
             f"{LOW_REPETITION}.", "",
             "| method | tau ± 2 SE | vs chain | low-repetition tau ± 2 SE (requests) | "
             "lossless | wall s |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['tau']:.2f} ± {r['tau_2se']:.2f} | "
                     f"{r['vs_chain']:.2f}x | {r['low_rep_tau']:.2f} ± {r['low_rep_2se']:.2f} "
                     f"({r['low_rep_requests']} of {r['requests']}) | {r['lossless']} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", type=Path, default=ZOO)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--budgets", default="16,32,64")
    p.add_argument("--out", type=Path, default=Path("experiments/tree_budget"))
    args = p.parse_args(argv)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(markdown(result["rows"], args))
    (args.out / "results.json").write_text(json.dumps(
        {"command": "python -m experiments.tree_budget " + " ".join(argv or []),
         "rows": result["rows"]}, indent=1))
    print(markdown(result["rows"], args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
