"""`python -m experiments.tree_budget [--num-prompts N] [--budgets 16,32,64] [--out DIR]`:
tau against the tree's node budget for the zoo pair (DFlash B = 16), next to the chain.

The chain, then trees of each budget (top-4 candidates per depth, reference/dflash_tree.py),
compared by experiments/zoo_methods.py, with each tau over the chain's. Writes results.md
and results.json. CPU, fp32; minutes at the default size.
"""

from __future__ import annotations

import argparse
import json
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
    p.add_argument("--out", type=Path, default=Path("experiments/tree_budget"))
    args = p.parse_args(argv)
    specs = methods(args.zoo, [int(b) for b in args.budgets.split(",")])
    rows = compare(args.zoo, specs, args.num_prompts, args.max_new_tokens)
    for r in rows:
        r.pop("accept_lengths")
        r["vs_chain"] = r["tau"] / rows[0]["tau"]
    text = table(rows, args.num_prompts, args.max_new_tokens, baseline=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(
        {"command": "python -m experiments.tree_budget " + " ".join(argv or []),
         "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
