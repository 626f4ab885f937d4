"""`python -m workbench decode`: decode prompts with the reference engine, AR or speculative.

    python -m workbench decode random:tiny --method oracle:tau=3,block_size=8 --batch-size 4
    python -m workbench decode path/to/Qwen3 --drafter path/to/DFlash --prompts p.jsonl
    python -m workbench decode random:tiny --method isd:stride=4

The target is an HF directory or `random:<preset>` (reference.loaders.PRESETS). The method
is any registered one (reference/methods/, `--method list` names them) as
`name:key=value,...`; `--drafter DIR` is the method of a drafter folder (its config's
variant: DFlash, or one of the ablations), `--drafter random` a DFlash drafter with random
weights of the preset's shapes; neither means plain autoregressive decoding. Prompts come
from a JSON-lines file of token-id lists, or are random. Prints tokens/s, tau, the
commit-length histogram and the per-round time split. The engine runs under the
EngineOptions of the shared flags (common/engine_options.py, e.g. --no-fused-qk).
"""

from __future__ import annotations

import argparse
import json

from common.engine_options import add_arguments, from_args


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m workbench decode", description=__doc__)
    p.add_argument("target", help="HF Qwen3 directory or random:<preset>")
    p.add_argument("--method", default=None,
                   help="registered method spec, e.g. oracle:tau=6.5, isd:stride=4, "
                        "prompt_lookup:block_size=8; 'list' prints the names")
    p.add_argument("--drafter", default=None, help="drafter folder, or 'random'")
    p.add_argument("--prompts", default=None, help="JSON lines, one list of token ids each")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=64, help="random prompts' length")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--block-size", type=int, default=None,
                   help="B of --drafter (default: the drafter's); a --method takes block_size=")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the layers (CUDA)")
    add_arguments(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    import torch

    from reference.generate import generate
    from reference.loaders import load_target, random_target
    from reference.methods import BuildContext, MethodSpec, build, names
    from reference.methods.variants import drafter_spec

    args = _args(argv)
    if args.method == "list":
        print("\n".join(names()))
        return 0
    if args.method and args.drafter:
        raise SystemExit("give --method or --drafter, not both")
    opts = from_args(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    preset = args.target.removeprefix("random:")
    if args.target.startswith("random:"):
        target = random_target(preset, device=device, dtype=dtype, options=opts)
    else:
        target = load_target(args.target, device=device, dtype=dtype, options=opts)
    if args.compile:
        target.enable_compile()
    if args.prompts:
        with open(args.prompts) as f:
            prompts = [json.loads(line) for line in f if line.strip()][: args.batch_size]
    else:
        gen = torch.Generator().manual_seed(0)
        shape = (args.batch_size, args.prompt_len)
        prompts = torch.randint(0, target.config.vocab_size, shape, generator=gen).tolist()
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    block = {} if args.block_size is None else {"block_size": args.block_size}
    if args.drafter == "random":
        spec = MethodSpec.of("dflash", random=preset, **block)
    elif args.drafter:
        spec = drafter_spec(args.drafter, **block)
    else:
        spec = MethodSpec.parse(args.method or "none")
    proposer = build(spec, target, BuildContext(prompts, args.max_new_tokens))
    print(f"method: {spec}")
    generate(target, prompts, proposer=proposer, max_new_tokens=min(8, args.max_new_tokens),
             **sampling)  # warm-up: CUDA graphs, compilation
    out = generate(target, prompts, proposer=proposer, max_new_tokens=args.max_new_tokens,
                   **sampling)
    _report(out.stats, proposer is not None, opts.asdict())
    return 0


def _report(s: dict, speculative: bool, engine_options: dict) -> None:
    rounds = max(s["rounds"], 1)
    print("engine options: " + ", ".join(f"{k}={v}" for k, v in engine_options.items()))
    print(f"decode: {s['tokens_per_s']:.1f} tok/s, {s['new_tokens']} new tokens, "
          f"{s['rounds']} rounds, prefill {s['prefill_s'] * 1e3:.1f} ms")
    if speculative:
        print(f"tau (mean commit length): {s['tau']:.3f}")
        total = sum(s["commit_hist"].values())
        for n, count in s["commit_hist"].items():
            print(f"  commit {n:>3}: {count:>6} {'#' * round(50 * count / total)}")
    split = {k: s[f"{k}_s"] * 1e3 / rounds for k in ("draft", "verify", "accept", "inject",
                                                     "host")}
    print("per round (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in split.items()))
