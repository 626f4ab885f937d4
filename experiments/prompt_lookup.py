"""`python -m experiments.prompt_lookup [--num-prompts N] [--out DIR]`: prompt-lookup
(n-gram) drafting next to DFlash on the zoo target's held-out test prompts.

DFlash with the zoo's B = 16 and B = 8 drafters and prompt lookup at B = 8 and 16 (n-grams
3..1, no drafter), compared by experiments/zoo_methods.py. Writes results.md, results.json
and, for the simulator's `acceptance=replay`, the prompt-lookup B = 8 commit lengths per
request (replay_prompt_lookup_b8.json). CPU, fp32; minutes at the default size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.zoo_methods import ZOO, compare, table
from reference.methods import MethodSpec
from reference.methods.variants import drafter_spec


def methods(zoo: Path) -> dict[str, MethodSpec]:
    return {"DFlash B = 16": drafter_spec(zoo / "dflash-b16"),
            "DFlash B = 8": drafter_spec(zoo / "dflash-b8"),
            "prompt lookup B = 8": MethodSpec.of("prompt_lookup", block_size=8),
            "prompt lookup B = 16": MethodSpec.of("prompt_lookup", block_size=16)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", type=Path, default=ZOO)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", type=Path, default=Path("experiments/prompt_lookup"))
    args = p.parse_args(argv)
    rows = compare(args.zoo, methods(args.zoo), args.num_prompts, args.max_new_tokens)
    commits = {r["method"]: r.pop("accept_lengths") for r in rows}
    replay = commits["prompt lookup B = 8"]
    text = table(rows, args.num_prompts, args.max_new_tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(
        {"command": "python -m experiments.prompt_lookup " + " ".join(argv or []),
         "rows": rows}, indent=1))
    (args.out / "replay_prompt_lookup_b8.json").write_text(json.dumps(replay))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
