"""`python -m experiments.tree_budget [--num-prompts N] [--budgets 16,32,64] [--temperature T]
[--device D] [--zoo PAIR] [--out DIR]`: tau against the tree's node budget for a pair (its
target/, tokenizer/ and dflash-b16/; default the zoo's; `artifacts/base` for the base pair's
recipe output), next to the chain (DFlash B = 16), paired on the same prompts.

The chain, then trees of each budget (top-4 candidates per depth, reference/methods/dflash_tree.py),
compared by experiments/zoo_methods.py, with each tau over the chain's and the paired
difference to it with 2 SE. Writes results.md and results.json. fp32; minutes on the CPU at
the default size, seconds per 1024 prompts on a GPU (`--device cuda`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.zoo_methods import ZOO, compare, table
from reference.methods import MethodSpec
from reference.methods.variants import drafter_spec


def methods(zoo: Path, budgets: list[int]) -> dict[str, MethodSpec]:
    chain = drafter_spec(zoo / "dflash-b16")
    return {"chain (B = 16)": chain,
            **{f"tree N = {n}": chain.with_options(tree_budget=n, tree_top_k=4)
               for n in budgets}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", type=Path, default=ZOO)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--budgets", default="16,32,64")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=Path("experiments/tree_budget"))
    args = p.parse_args(argv)
    specs = methods(args.zoo, [int(b) for b in args.budgets.split(",")])
    rows = compare(args.zoo, specs, args.num_prompts, args.max_new_tokens,
                   temperature=args.temperature, device=args.device)
    for r in rows:
        r.pop("accept_lengths")
        r["vs_chain"] = r["tau"] / rows[0]["tau"]
    text = table(rows, args.num_prompts, args.max_new_tokens, baseline=True,
                 temperature=args.temperature, pair=args.zoo)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(
        {"command": "python -m experiments.tree_budget "
                    + " ".join(sys.argv[1:] if argv is None else argv),
         "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
