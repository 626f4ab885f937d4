"""`python -m workbench validate run|report`: the simulator against the reference engine.

`run` (GPU; torch only, no hydra or simpy) drives the reference engine (`generate`, CUDA
graphs, compiled layers) on random weights of one model over a grid: concurrency {1, 4, 16,
64} x speculation off and DFlash with B in {4, 8, 16} (oracle proposer: the target's own
greedy continuation corrupted to the fixed survival curve s_j = alpha^j, with the z-lab-shaped
drafter's draft and injection running every round), fixed prompt and output lengths, each
cell after one untimed warm-up run and then `--repeats` times. It records per-round wall and
device times, commit lengths and the prefill time to `<out>/validation-<model>.json`.

`report` (CPU) simulates the same cells with the calibration table, once replaying the
recorded commit lengths and once with the sampled acceptance model, and writes
experiments/validation/h200-<model>.{md,csv,png} (workbench/validate/report.py).

    python -m workbench validate run model=qwen3-8b --out OUT
    python -m workbench validate report OUT/validation-qwen3-8b.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from common.engine_options import add_arguments, from_args
from common.stamps import stamp
from common.survival import geometric_curve
from workbench.atomic import write_text
from workbench.errors import OneLineParser, int_list, need_cuda, ranged


def run_cell(target, prompts, proposer, new_tokens: int) -> tuple[dict, list]:
    """One generate run: (per-request commits and token counts, per-round times; tokens)."""
    from reference.generate import generate

    out = generate(target, prompts, proposer=proposer, max_new_tokens=new_tokens)
    s = out.stats
    return {"prefill_s": s["prefill_s"], "decode_s": s["decode_s"],
            "tokens_per_request": [len(t) for t in out.tokens],
            "accept_lengths": out.accept_lengths, "round_times": s["round_times"],
            "tau": s["tau"], "rounds": s["rounds"]}, out.tokens


def measure(args) -> dict:
    """Every cell of the grid, `args.repeats` times each after a warm-up."""
    import torch

    from reference.generate import generate
    from reference.loaders import random_target
    from reference.methods import BuildContext, MethodSpec, build

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    target = random_target(args.model, device=dev,
                           dtype=torch.bfloat16 if cuda else torch.float32,
                           options=args.engine_options)
    if cuda and not args.no_compile:
        target.enable_compile()
    base = build(MethodSpec.of("dflash", random=args.model), target)
    drafters = {b: build(MethodSpec.of("dflash", weights_of=base, block_size=b), target)
                for b in args.blocks}
    gen = torch.Generator().manual_seed(0)
    vocab = target.config.vocab_size
    prompts = torch.randint(0, vocab, (max(args.concurrency), args.prompt), generator=gen)
    prompts = prompts.tolist()
    b0 = max(args.blocks)
    # The first call sizes the pool (draft layers, full context) for every later call.
    setup = build(MethodSpec.of("oracle", block_size=b0, shadow=True), target,
                  BuildContext(streams=[[0]], drafter=drafters[b0]))
    generate(target, prompts[:1], proposer=setup, max_new_tokens=args.new_tokens)
    runs = []
    for c in args.concurrency:
        batch = prompts[:c]
        t0 = time.perf_counter()
        _, streams = run_cell(target, batch, None, args.new_tokens)  # warm-up
        for r in range(args.repeats):
            cell, _ = run_cell(target, batch, None, args.new_tokens)
            runs.append({"concurrency": c, "method": "none", "block": 1, "repeat": r, **cell})
        for b in args.blocks:
            curve = geometric_curve(args.alpha, b)
            for r in range(-1, args.repeats):  # -1: warm-up (graph captures of every bucket)
                oracle = build(MethodSpec.of("oracle", survival=curve, block_size=b,
                                             seed=1000 * b + r, shadow=True), target,
                               BuildContext(streams=streams, drafter=drafters[b]))
                cell, tokens = run_cell(target, batch, oracle, args.new_tokens)
                if r >= 0:
                    runs.append({"concurrency": c, "method": "dflash", "block": b,
                                 "repeat": r, "lossless": tokens == streams, **cell})
        print(f"c={c}: {time.perf_counter() - t0:.1f} s", flush=True)
    return {"model": args.model, **stamp(engine_options=target.options.asdict()),
            "compile": not args.no_compile,
            "setup": {"prompt_tokens": args.prompt, "new_tokens": args.new_tokens,
                      "alpha": args.alpha, "blocks": args.blocks,
                      "concurrency": args.concurrency, "repeats": args.repeats,
                      "engine": "reference.generate (sync: one host sync per round)"},
            "runs": runs}



def _ints(text: str) -> list[int]:
    return [int(x) for x in int_list(1, 4096)(text).split(",")]


SMOKE = ("python -m workbench validate run model=tiny --device cpu --concurrency 1 --blocks 4 "
         "--repeats 1 --prompt 8 --new-tokens 8 --out validation-smoke")
MODELS = ("tiny", "toy", "qwen3-4b", "qwen3-8b", "llama-3.1-8b")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] not in ("run", "report"):
        print(f"validate: {argv[0]!r} is not a subcommand (run, report; see --help)",
              file=sys.stderr)
        return 2
    if argv[0] == "report":
        from workbench.validate.report import main as report_main

        return report_main(argv[1:])
    keys = dict(a.split("=", 1) for a in argv[1:] if "=" in a and not a.startswith("-"))
    p = OneLineParser(prog="python -m workbench validate run")
    p.add_argument("--out", default=".")
    p.add_argument("--device", default="cuda")
    p.add_argument("--concurrency", type=_ints, default=[1, 4, 16, 64])
    p.add_argument("--blocks", type=_ints, default=[4, 8, 16])
    p.add_argument("--repeats", type=ranged(int, 1, 1000), default=3)
    p.add_argument("--prompt", type=ranged(int, 1, 1 << 20), default=512)
    p.add_argument("--new-tokens", type=ranged(int, 1, 1 << 20), default=128)
    p.add_argument("--alpha", type=ranged(float, 0, 1), default=0.85,
                   help="oracle: s_j = alpha^j, alpha in [0, 1]")
    p.add_argument("--no-compile", action="store_true")
    add_arguments(p)
    args = p.parse_args([a for a in argv[1:] if a.startswith("-") or "=" not in a])
    args.engine_options = from_args(args)
    args.model = keys.pop("model", "qwen3-8b")
    if keys:
        p.error(f"unknown keys {sorted(keys)} (model=...)")
    if args.model not in MODELS:
        p.error(f"model={args.model} is not one of {', '.join(MODELS)}")
    args.device = need_cuda(args.device, "validate run", SMOKE)
    t0 = time.perf_counter()
    doc = measure(args)
    doc["wall_s"] = time.perf_counter() - t0
    out = Path(args.out) / f"validation-{args.model}.json"
    write_text(out, json.dumps(doc))
    print(f"{len(doc['runs'])} runs in {doc['wall_s']:.1f} s -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
