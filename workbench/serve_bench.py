"""`python -m workbench serve-bench`: the serving loop, sync vs overlap, over a concurrency sweep.

    python -m workbench serve-bench --out serve_bench.json            # H200: 8B-shaped, oracle
    python -m workbench serve-bench --target random:tiny --device cpu --concurrency 1,4 \\
        --prompt-len 16 --max-new-tokens 24 --requests-per-client 2   # CPU smoke, seconds

Closed loop: at concurrency C, C clients each send their next request when the previous one
finishes, C * requests-per-client requests in all (prompts of random tokens, max new tokens
drawn in [(1 - spread) * max, max]); with --rate, an open loop of Poisson arrivals instead,
the concurrency capping the running batch. Methods: `ar` (no speculation) and `oracle` (DFlash
rounds at controlled acceptance: a drafter of the preset's DFlash shapes runs its draft
forward and KV injection every round, its drafts replaced by the target's own greedy
continuation corrupted to mean commit length --tau, B = --block-size), and `dflash` (that
drafter's own drafts: a trained one via --drafter PATH, e.g. the toy model's). Each runs in `sync`
and `overlap` mode (reference/serve/loop.py). Reported per run: output tokens/s, TPOT, TTFT,
tau, device idle fraction between steps, round time, host time per step, and whether every
request's tokens equal plain greedy decoding. Prints a table, then one JSON line; --out
writes the JSON stamped with git SHA and versions; --trace-dir writes a Chrome trace per run.
On the CPU the "device" runs inside the host's launch, so only the GPU's numbers mean much.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import replace
from pathlib import Path


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m workbench serve-bench",
                                description=__doc__.splitlines()[0])
    p.add_argument("--target", default="random:qwen3-8b", help="random:<preset> or HF dir")
    p.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    p.add_argument("--concurrency", default="1,4,8,16,32,64")
    p.add_argument("--modes", default="sync,overlap")
    p.add_argument("--methods", default="ar,oracle")
    p.add_argument("--tau", type=float, default=6.5, help="oracle's mean commit length")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--drafter", default="random",
                   help="'random' (the preset's DFlash shapes), a z-lab DFlash directory, or "
                        "'none'; the oracle runs it as its shadow, method dflash drafts with it")
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--spread", type=float, default=0.5, help="max new tokens spread (0..1)")
    p.add_argument("--requests-per-client", type=int, default=3)
    p.add_argument("--rate", type=float, default=None,
                   help="open loop instead: Poisson arrivals (req/s), concurrency caps the batch")
    p.add_argument("--prefill-budget", type=int, default=8192)
    p.add_argument("--no-compile", action="store_true", help="eager layers in the CUDA graphs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace-dir", default=None)
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def _workload(args, vocab: int, n: int):
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(n)]
    low = max(1, round(args.max_new_tokens * (1 - args.spread)))
    return prompts, [rng.randint(low, args.max_new_tokens) for _ in range(n)]


def _streams(target, prompts, max_new) -> list[list[int]]:
    """Plain greedy tokens of every request (the oracle's streams and the lossless check)."""
    from reference.generate import generate

    out = []
    for i in range(0, len(prompts), 64):
        toks = generate(target, prompts[i: i + 64], max_new_tokens=max(max_new[i: i + 64]))
        out += [t[:m] for t, m in zip(toks.tokens, max_new[i: i + 64])]
    return out


def _run(target, proposer, reqs, streams, conc: int, mode: str, args) -> tuple[dict, object]:
    from reference.serve import ClosedLoop, OpenLoop, ServeConfig, Server, poisson_arrivals

    if args.rate is None:
        workload = ClosedLoop(reqs, conc)
    else:
        times = poisson_arrivals(args.rate, len(reqs), args.seed)
        workload = OpenLoop([replace(r, arrival_s=t) for r, t in zip(reqs, times)])
    cfg = ServeConfig(mode=mode, max_running=conc, prefill_budget=args.prefill_budget,
                      seed=args.seed)
    context = max(len(r.prompt) + r.max_new_tokens for r in reqs)
    server = Server(target, proposer, cfg, context)
    server.warm_up(conc)
    out = server.run(workload)
    s = out.stats
    row = {"concurrency": conc, "mode": mode, "throughput_tok_s": s["throughput_tok_s"],
           "tpot_ms": 1e3 * s["tpot_s"], "ttft_ms": 1e3 * s["ttft_s"], "tau": s["tau"],
           "gpu_idle_fraction": s.get("gpu_idle_fraction", 0.0),
           "round_ms": s.get("round_ms", 0.0), "gap_ms_per_step": s.get("gap_ms_per_step", 0.0),
           "host_ms_per_step": s.get("host_ms_per_step", 0.0),
           "host_wait_ms_per_step": s.get("host_wait_ms_per_step", 0.0),
           "decode_rounds": s["decode_rounds"], "prefill_steps": s["prefill_steps"],
           "discarded_rows": s["discarded_rows"], "output_tokens": s["output_tokens"],
           "wall_s": s["wall_s"],
           "lossless": out.tokens == [streams[r.rid] for r in reqs]}
    return row, out.timeline


def run(argv=None) -> dict:
    """Run the sweep of `argv` (the command's arguments); returns the result document."""
    import torch

    from reference.engine import runtime
    from reference.loaders import (
        DFLASH_PRESETS,
        load_dflash,
        load_target,
        random_dflash,
        random_target,
    )
    from reference.proposers import OracleProposer, geometric_survival
    from reference.serve import make_requests

    args = _args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device == "cuda"
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(1)  # tiny CPU models: OpenMP threads only add contention
    try:
        dtype = torch.bfloat16 if cuda else torch.float32
        preset = args.target.removeprefix("random:")
        if args.target.startswith("random:"):
            target = random_target(preset, device=device, dtype=dtype, seed=args.seed)
        else:
            target = load_target(args.target, device=device, dtype=dtype)
        if cuda and not args.no_compile:
            target.enable_compile()
        sweep = [int(c) for c in args.concurrency.split(",")]
        n = max(sweep) * args.requests_per_client
        prompts, max_new = _workload(args, target.config.vocab_size, n)
        streams = _streams(target, prompts, max_new)
        block = args.block_size
        shadow = None
        if args.drafter == "random" and preset in DFLASH_PRESETS:
            shadow = random_dflash(preset, target, block_size=block)
        elif args.drafter not in ("random", "none"):
            shadow = load_dflash(args.drafter, target, block_size=block)
        context = args.prompt_len + args.max_new_tokens + 2 * block
        runtime(target, shadow.draft_kv if shadow else None, max(sweep),
                -(-context // 64) * 64)  # one pool (with the draft KV) for every run
        curve = geometric_survival(args.tau, block)
        result = {"env": _env(torch, cuda), "args": vars(args), "rows": []}
        for conc in sweep:
            reqs = make_requests(prompts[: conc * args.requests_per_client],
                                 max_new[: conc * args.requests_per_client])
            for method in args.methods.split(","):
                for mode in args.modes.split(","):
                    if method == "oracle":
                        proposer = OracleProposer(streams, block, curve, seed=args.seed + conc,
                                                  shadow=shadow)
                    elif method == "dflash" and shadow is None:
                        raise ValueError("method dflash needs --drafter random or a directory")
                    else:
                        proposer = shadow if method == "dflash" else None
                    row, timeline = _run(target, proposer, reqs, streams, conc, mode, args)
                    result["rows"].append({"method": method, **row})
                    if args.trace_dir:
                        timeline.write(Path(args.trace_dir) / f"c{conc}_{method}_{mode}.json")
        result["ratios"] = _ratios(result["rows"])
    finally:
        torch.set_num_threads(threads)
    _print(result)
    if args.out:
        from workbench.results import write_json

        write_json(Path(args.out), result)
    return result


def main(argv=None) -> int:
    run(argv)
    return 0


def _env(torch, cuda: bool) -> dict:
    def version(name):
        try:
            return __import__(name).__version__
        except ImportError:
            return None

    return {"gpu": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
            "triton": version("triton"), "transformers": version("transformers")}


def _ratios(rows: list[dict]) -> list[dict]:
    """Overlap over sync throughput per (concurrency, method)."""
    by = {(r["concurrency"], r["method"], r["mode"]): r for r in rows}
    out = []
    for (conc, method, mode), r in by.items():
        sync = by.get((conc, method, "sync"))
        if mode == "overlap" and sync is not None and sync["throughput_tok_s"] > 0:
            out.append({"concurrency": conc, "method": method,
                        "overlap_over_sync": r["throughput_tok_s"] / sync["throughput_tok_s"]})
    return out


def _print(result: dict) -> None:
    env = result["env"]
    print(f"{env['gpu']}  torch {env['torch']}  triton {env['triton']}")
    print(f"{'C':>3} {'method':>6} {'mode':>7} {'tok/s':>9} {'TPOT ms':>8} {'TTFT ms':>8} "
          f"{'tau':>5} {'idle':>6} {'round ms':>8} {'host ms':>7} {'discard':>7} lossless")
    for r in result["rows"]:
        print(f"{r['concurrency']:>3} {r['method']:>6} {r['mode']:>7} "
              f"{r['throughput_tok_s']:>9.1f} {r['tpot_ms']:>8.2f} {r['ttft_ms']:>8.1f} "
              f"{r['tau']:>5.2f} {r['gpu_idle_fraction']:>6.1%} {r['round_ms']:>8.2f} "
              f"{r['host_ms_per_step']:>7.2f} {r['discarded_rows']:>7} {r['lossless']}")
    for q in result["ratios"]:
        print(f"C={q['concurrency']} {q['method']}: overlap / sync throughput "
              f"{q['overlap_over_sync']:.3f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
