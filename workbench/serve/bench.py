"""`python -m workbench serve-bench`: the serving loop, sync vs overlap, over a concurrency sweep.

    python -m workbench serve-bench --out DIR --toy artifacts/toy     # H200: see below
    python -m workbench serve-bench --target random:tiny --device cpu --concurrency 1,4 \\
        --prompt-len 16 --max-new-tokens 24 --out /tmp/sb              # CPU smoke, seconds

Defaults fit the machine: on a GPU a random Qwen3-8B-shaped bf16 target at concurrency
1, 4, ..., 64; without one the CPU smoke (random:tiny, concurrency 1 and 4, 16 prompt
tokens, 24 new), said in one line; `--device cuda` without a GPU is a one-line error.
Setups: `--target` (default a random Qwen3-8B-shaped bf16 model on a GPU) with `--methods`,
registered method specs separated by ';' (reference/methods/; default `none` and `oracle`:
DFlash rounds at controlled acceptance, the shared `--drafter` running its draft forward and
KV injection every round as the oracle's shadow, its drafts replaced by the target's own
greedy continuation corrupted to a geometric survival curve of mean commit length --tau, B =
--block-size); with `--toy DIR`, then the toy target DIR/target with `none` and its trained
drafter DIR/dflash-b16, prompts from the toy corpus' test split.
Each method runs in `sync` and `overlap` mode (reference/serve/loop.py), each run after a
warm-up through the same loop (`Server.warm_up`: one batch of requests per batch bucket).
Closed loop: at concurrency C, C clients each send their next request when the previous one
finishes, max(C * requests-per-client, min-requests) requests of --prompt-len tokens and
--max-new-tokens new tokens (no stop token, so every mode emits the same tokens); with
--rate, Poisson arrivals instead, C capping the running batch.
Reported per run: output tokens/s, TPOT mean and p99, TTFT, tau, GPU idle between steps
(all steps; and decode -> decode, over the round period), round time, host time per step
(plan + launch + process), implicit host-device syncs during the run (torch's sync debug
mode; the loop's event fences are explicit and not counted), and whether every request's
tokens equal plain greedy decoding.
The engine runs under the EngineOptions of the shared flags (common/engine_options.py, e.g.
--no-triton-gemv, --compiled-prefill), stamped into the result as "engine_options".
--out DIR gets serve_bench.json (stamped with git SHA and versions; also the setups' shapes
and acceptance, for `python -m experiments.spec_v2`), serve_bench.md (the table) and
traces/<setup>_c<C>_<method>_<mode>.json (Chrome traces); a DIR that already holds one of
them is refused in one line before anything runs. On the CPU the "device" runs inside the
host's launch, so only the GPU's numbers mean much.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

from common.engine_options import add_arguments, from_args
from common.stamps import command_line, stamp
from workbench.errors import (
    OneLineParser,
    UserError,
    fresh_output,
    int_list,
    name_list,
    need_cuda,
    ranged,
)
from workbench.serve.report import ratios, save, show

T0 = time.perf_counter()


SMOKE = {"target": "random:tiny", "concurrency": "1,4", "prompt_len": 16, "max_new_tokens": 24}
GPU = {"target": "random:qwen3-8b", "concurrency": "1,4,8,16,32,64", "prompt_len": 256,
       "max_new_tokens": 128}
BIG = 1 << 20
OUTPUTS = ("serve_bench.json", "serve_bench.md", "traces")  # what --out DIR gets


def _args(argv):
    p = OneLineParser(prog="python -m workbench serve-bench",
                      description=__doc__.splitlines()[0])
    p.add_argument("--target", default=None, help="random:<preset> or HF dir (default: "
                   "random:qwen3-8b on a GPU, random:tiny on the CPU)")
    p.add_argument("--toy", default=None, help="recipe folder (target/, dflash-b16/): run it too")
    p.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    p.add_argument("--concurrency", type=int_list(1, 4096), default=None,
                   help="comma-separated, each in [1, 4096] (default: 1,4,...,64 on a GPU, "
                        "1,4 on the CPU)")
    p.add_argument("--modes", type=name_list(("sync", "overlap")), default="sync,overlap")
    p.add_argument("--methods", default=None,
                   help="method specs of --target separated by ';' (default: none;oracle:"
                        "tau=TAU,block_size=B,shadow=true)")
    p.add_argument("--tau", type=ranged(float, 1, 256), default=6.5,
                   help="default oracle's mean commit length, in [1, --block-size]")
    p.add_argument("--block-size", type=ranged(int, 1, 256), default=16)
    p.add_argument("--drafter", default="random",
                   help="the shared drafter: 'random' (the preset's DFlash shapes), a drafter "
                        "folder, or 'none'; an oracle with shadow=true runs it as its shadow")
    p.add_argument("--prompt-len", type=ranged(int, 1, BIG), default=None,
                   help="default 256 on a GPU, 16 on the CPU")
    p.add_argument("--max-new-tokens", type=ranged(int, 1, BIG), default=None,
                   help="default 128 on a GPU, 24 on the CPU")
    p.add_argument("--spread", type=ranged(float, 0, 1), default=0.0, help="max new tokens "
                   "drawn in [(1 - spread) * max, max], spread in [0, 1]")
    p.add_argument("--requests-per-client", type=ranged(int, 1, BIG), default=3)
    p.add_argument("--min-requests", type=ranged(int, 0, BIG), default=4)
    p.add_argument("--rate", type=ranged(float, 0, None, open_lo=True), default=None,
                   help="open loop instead: Poisson arrivals (req/s), concurrency caps the batch")
    p.add_argument("--prefill-budget", type=ranged(int, 1, BIG), default=8192)
    p.add_argument("--no-compile", action="store_true", help="eager layers in the CUDA graphs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="output folder (refused when it already holds "
                   "a serve-bench result)")
    add_arguments(p)
    args = p.parse_args(argv)
    if args.tau > args.block_size:
        p.error(f"argument --tau: {args.tau:g} is above --block-size = {args.block_size}")
    return args


def fit_machine(args) -> str:
    """The device, and the defaults left unset filled for it (SMOKE on the CPU, GPU on a
    GPU); says so in one line on stderr when the CPU smoke replaces the GPU sweep."""
    device = need_cuda(args.device, "serve-bench",
                       "python -m workbench serve-bench --device cpu (random:tiny, seconds)")
    filled = SMOKE if device == "cpu" else GPU
    unset = [k for k in filled if getattr(args, k) is None]
    for k in unset:
        setattr(args, k, filled[k])
    if device == "cpu" and "target" in unset:
        print("serve-bench: no CUDA device, so the CPU smoke run: " + ", ".join(
            f"--{k.replace('_', '-')} {filled[k]}" for k in unset), file=sys.stderr)
    _check_target(args.target)
    return device


def _check_target(target: str) -> None:
    from reference.loaders import PRESETS

    if target.startswith("random:"):
        if target.removeprefix("random:") not in PRESETS:
            raise UserError(f"--target {target}: the preset must be one of "
                            f"{', '.join(sorted(PRESETS))}")
    elif not (Path(target) / "config.json").is_file():
        raise UserError(f"--target {target}: no config.json there (random:<preset> or an HF "
                        "model folder)")


def _lengths(args, n: int) -> list[int]:
    rng = random.Random(args.seed + 1)
    low = max(1, round(args.max_new_tokens * (1 - args.spread)))
    return [rng.randint(low, args.max_new_tokens) for _ in range(n)]


def _random_prompts(args, vocab: int, n: int) -> list[list[int]]:
    rng = random.Random(args.seed)
    return [[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(n)]


def _toy_prompts(toy: Path, args, vocab: int, n: int) -> list[list[int]]:
    """Windows of the toy corpus' test split (random tokens without the recipe's tokenizer)."""
    tok_path = toy / "tokenizer" / "tokenizer.json"
    if not tok_path.exists():
        return _random_prompts(args, vocab, n)
    from toy.gen_data import split_prompts
    from toy.tokenizer import load_tokenizer

    lo = max(1, args.prompt_len // 2)
    return split_prompts(load_tokenizer(tok_path), "test", n, (lo, args.prompt_len), args.seed)


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
    server.warm_up(conc, max(len(r.prompt) for r in reqs))  # the timed run's paths
    out, syncs = _counting_syncs(server, workload)
    s = out.stats
    row = {"concurrency": conc, "mode": mode, "requests": len(reqs),
           "throughput_tok_s": s["throughput_tok_s"], "tpot_ms": 1e3 * s["tpot_s"],
           "tpot_p99_ms": 1e3 * s["tpot_p99_s"], "ttft_ms": 1e3 * s["ttft_s"], "tau": s["tau"],
           "acceptance_length": s["tau"],  # SGLang's and vLLM's name for tau
           **{k: s.get(k, 0.0) for k in ("gpu_idle_fraction", "round_idle_fraction",
                                         "round_ms", "gap_ms_per_step", "host_ms_per_step",
                                         "host_wait_ms_per_step", "plan_ms_per_step",
                                         "launch_ms_per_step", "process_ms_per_step",
                                         "decode_launch_ms", "prefill_launch_ms", "prefill_ms",
                                         "prefill_share")},
           **{k: s[k] for k in ("decode_rounds", "prefill_steps", "discarded_rows",
                                "fenced_plans", "output_tokens", "wall_s")},
           "implicit_syncs": syncs, "lossless": out.tokens == [streams[r.rid] for r in reqs]}
    return row, out.timeline


def _counting_syncs(server, workload):
    """server.run(workload) under torch's CUDA sync debug mode: returns its result and how
    many implicit host-device syncs (an .item(), a copy to pageable memory...) it made; the
    loop's own fences (event waits) are not counted."""
    import warnings

    import torch

    if server.device.type != "cuda":
        return server.run(workload), 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = server.run(workload)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return out, sum("synchroniz" in str(w.message) for w in caught)


def _sweep(name, target, shadow, methods, prompts, max_new, args, result: dict) -> None:
    """Every (concurrency, method, mode) run of one setup into `result` (saved after each)."""
    from reference.engine import runtime
    from reference.methods import BuildContext, build
    from reference.serve import make_requests

    sweep = [int(c) for c in args.concurrency.split(",")]
    streams = _streams(target, prompts, max_new)
    context = BuildContext(prompts, max(max_new), streams, shadow)
    built = {}
    for spec in methods:  # one proposer per method, reseeded per concurrency by the engine
        built[spec] = build(spec, target, context)
    blocks = [p.block_size for p in built.values() if p is not None] or [1]
    width = max(len(p) for p in prompts) + max(max_new) + 2 * max(blocks)
    runtime(target, shadow.draft_kv if shadow else None, max(sweep),
            -(-width // 64) * 64)  # one pool (with the draft KV) for every run
    result["setups"][name] = _shapes(name, target, shadow, prompts, max_new, built, args)
    for conc in sweep:
        n = max(conc * args.requests_per_client, args.min_requests)
        reqs = make_requests(prompts[:n], max_new[:n])
        for spec, proposer in built.items():
            method = spec.name
            for mode in args.modes.split(","):
                row, timeline = _run(target, proposer, reqs, streams, conc, mode, args)
                result["rows"].append({"setup": name, "method": method, "spec": str(spec),
                                       **row})
                print(f"[{time.perf_counter() - T0:6.1f} s] {name} C={conc} {method} {mode}: "
                      f"{row['throughput_tok_s']:.1f} tok/s", flush=True)
                if args.out:
                    timeline.write(Path(args.out) / "traces" /
                                   f"{name}_c{conc}_{method}_{mode}.json")
                    save(result, args.out)


def _shapes(name, target, shadow, prompts, max_new, built, args) -> dict:
    """What `experiments.spec_v2` needs to simulate the setup."""
    c = target.config
    model = {"name": name, "hidden_size": c.hidden_size, "num_layers": c.num_layers,
             "num_heads": c.num_heads, "num_kv_heads": c.num_kv_heads, "head_dim": c.head_dim,
             "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
             "tie_embeddings": c.tie_word_embeddings, "dtype_bytes": target.dtype.itemsize}
    drafter = None
    if shadow is not None:
        drafter = {"layers": shadow.draft_kv.num_layers, "block_size": shadow.block_size,
                   "target_features": len(shadow.target_layer_ids)}
    lens = [len(p) for p in prompts]
    mean = sum(lens) / len(lens)
    curves = [getattr(p, "survival", None) for p in built.values()]
    curve = next((c for c in curves if c is not None), None)
    return {"model": model, "drafter": drafter, "oracle_survival": curve,
            "prompt_tokens_mean": mean,
            "prompt_tokens_cv": (sum((x - mean) ** 2 for x in lens) / len(lens)) ** 0.5 / mean,
            "prompt_tokens_max": max(lens), "output_tokens_mean": sum(max_new) / len(max_new),
            "output_tokens_max": max(max_new), "prefill_budget": args.prefill_budget}


def _release(target) -> None:
    """Free a setup's pool, graphs and weights before the next setup sizes its pool."""
    import torch

    if target is not None and target.runtime is not None:
        target.runtime.pool.close()
        target.runtime = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run(argv=None) -> dict:
    """Run the sweep of `argv` (the command's arguments); returns the result document. The
    arguments are checked before torch is imported, so a bad one fails in a blink."""
    args = _args(argv)
    if args.out:
        fresh_output(args.out, OUTPUTS)

    import torch

    from reference.loaders import DFLASH_PRESETS, load_target, random_target
    from reference.methods import MethodSpec, build
    from reference.methods.variants import drafter_spec

    opts = from_args(args)
    device = fit_machine(args)
    cuda = device.startswith("cuda")
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(1)  # tiny CPU models: OpenMP threads only add contention
    dtype = torch.bfloat16 if cuda else torch.float32
    n = max(max(int(c) for c in args.concurrency.split(",")) * args.requests_per_client,
            args.min_requests)
    max_new = _lengths(args, n)
    result = {"meta": stamp(command=command_line(), engine_options=opts.asdict()),
              "args": vars(args), "setups": {}, "rows": []}
    try:
        preset = args.target.removeprefix("random:")
        if args.target.startswith("random:"):
            target = random_target(preset, device=device, dtype=dtype, seed=args.seed,
                                   options=opts)
        else:
            target = load_target(args.target, device=device, dtype=dtype, options=opts)
        if cuda and not args.no_compile:
            target.enable_compile()
        shadow = None
        if args.drafter == "random" and preset in DFLASH_PRESETS:
            shadow = build(MethodSpec.of("dflash", random=preset, block_size=args.block_size),
                           target)
        elif args.drafter not in ("random", "none"):
            shadow = build(drafter_spec(args.drafter, block_size=args.block_size), target)
        methods = args.methods or (f"none;oracle:tau={args.tau},block_size={args.block_size},"
                                   f"shadow={'true' if shadow is not None else 'false'}")
        prompts = _random_prompts(args, target.config.vocab_size, n)
        name = Path(preset).name
        _sweep(name, target, shadow, [MethodSpec.parse(m) for m in methods.split(";")],
               prompts, max_new, args, result)
        if args.toy:
            _release(target)
            del target, shadow
            _release(None)
            toy = Path(args.toy)
            target = load_target(toy / "target", device=device, dtype=dtype, options=opts)
            if cuda and not args.no_compile:
                target.enable_compile()
            drafter = drafter_spec(toy / "dflash-b16")
            shadow = build(drafter, target)
            prompts = _toy_prompts(toy, args, target.config.vocab_size, n)
            _sweep("toy", target, shadow, [MethodSpec.of("none"), drafter], prompts, max_new,
                   args, result)
        _release(target)
        result["ratios"] = ratios(result["rows"])
    finally:
        torch.set_num_threads(threads)
    show(result)
    if args.out:
        save(result, args.out, "complete")
    return result


def main(argv=None) -> int:
    """Entry point; Ctrl-C ends in one line that says what serve_bench.json kept."""
    try:
        run(argv)
    except KeyboardInterrupt:
        out = _args(argv).out
        kept = (f"the finished runs are in {out}/serve_bench.json (status = interrupted)"
                if out else "nothing was kept (no --out)")
        print(f"serve-bench interrupted: {kept}; rerun with --concurrency set to the points "
              "left", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    main()
