"""`python -m workbench.bench`: the reference engine's decode speed on an H200, in one run.

On Qwen3-8B-shaped random bf16 weights (random:qwen3-8b, 16.4 GB), for each batch size:
plain autoregressive decode (AR), and DFlash with a drafter of the z-lab Qwen3-8B-DFlash-b16
shapes whose drafts are replaced by the oracle proposer's (target greedy continuation
corrupted to a geometric survival curve with mean commit length tau), so the round costs are
DFlash's and the acceptance is controlled. At batch 1 it also times transformers' `generate`
(eager attention, dynamic cache) on the same weights. Reported: decode tokens/s, tau, round
efficiency = time inside the draft and verify forwards / round wall time, speedup of DFlash
over the engine's own AR at the same batch, and the per-round time split. A batch decodes
until its slowest request ends, so its last rounds run with requests already done; the
full-batch tok/s (`bench_report.full_batch_tok_s`) is the rate of the leading rounds in
which every request is live, what a server that refills its slots would approach without
prefills; `full_batch_split_ms` splits those rounds by phase.
Batch-1 AR is compared with the 263 tok/s bound of streaming the weights at the measured
4.30 TB/s (an MoE preset, e.g. random:qwen3-30b-a3b: its active weights per token,
`bound_tok_s`; --hf-new-tokens 0 there, transformers' MoE loop is not timed).
`--block-size 8,10,16` runs DFlash at each B side by side against the same AR runs (the
verify block's cost against tau at a batch size; `oracle_tau`);
`--verify-schedule '[[1,15,15],[16,1024,9]]'` verifies blocks of 10 in rounds of 16 or more
live requests and B = 16 below; schedules joined by ';' ("none": every round at B) run side
by side against the same AR runs too.
The default oracle plans each request's commit lengths (oracle plan=true,
common/survival.py plan_rounds), so a row's realized tau (`tau_realized`, sync and
lookahead) is its requested one (`tau_requested`) within 1%; `at_tau` gives the tok/s at the
requested tau (the measured rate scaled by requested / realized, None and tau_ok False past
1%), and `clock` each run's whole-call tok/s by an outside clock (perf_counter around
`generate`, device synchronized) beside the engine's own counters.
Prints a table, then one JSON line; --out writes the JSON too. Under `torchrun
--nproc-per-node N`, `--tp N` runs the engine's tensor-parallel shards (reference/parallel.py;
workbench/bench/tp.py has the TP sweep with the all-reduce time).

The engine runs under the EngineOptions of the shared flags (common/engine_options.py, e.g.
--no-fused-qk, --unsplit-width N), stamped into the JSON as "engine_options".

--ablate (workbench/bench/ablate.py) instead measures batch-1 AR decode only, in one run,
for every kernel switch off, then each of the opt-in paths (fused q/k tail, the short-context
attention rule at --ablate-unsplit-width, fused split-K merge, Triton GEMV), each row its own
EngineOptions (about 2 min on the H200):

    python -m workbench.bench --ablate --new-tokens 128 --out bs1_ablation.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from common import engine_options
from common.stamps import stamp
from common.survival import geometric_survival
from reference.engine import PHASES
from reference.generate import generate
from reference.loaders import (
    PRESETS,
    preset_config,
    random_state_dict,
    random_target,
)
from reference.methods import BuildContext, MethodSpec, build
from reference.moe import active_weight_bytes
from reference.parallel import shard_target
from workbench.bench.ablate import ablate, print_ablation
from workbench.bench.report import (
    at_tau,
    clock_check,
    full_batch_split_ms,
    full_batch_tok_s,
    print_result,
    print_stamp,
)
from workbench.bench.tp import join
from workbench.errors import need_cuda

BOUND_TOK_S = 263.0  # 16.4 GB of weights at 4.30 TB/s
COPY_TBPS = 4.30  # the H200's measured copy bandwidth


def bound_tok_s(cfg) -> float:
    """Batch-1 AR's weight-streaming bound: Qwen3-8B's 263 tok/s (all 16.4 GB, as every
    dense run has reported it); an MoE preset's active weights per token (reference/moe.py
    `active_weight_bytes`: 6.08 GB for Qwen3-30B-A3B, 707 tok/s) at COPY_TBPS."""
    if not cfg.num_experts:
        return BOUND_TOK_S
    return COPY_TBPS * 1e12 / active_weight_bytes(cfg)


def hf_decode_tok_s(preset: str, state: dict, prompt: list[int], new_tokens: int,
                    device: str = "cuda", dtype: torch.dtype = torch.bfloat16):
    """transformers generate on the same weights (`state`, of `dtype` on `device`):
    (decode tok/s, greedy tokens)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = dict(PRESETS[preset])
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch.set_default_dtype(dtype)
    with torch.device(device):
        model = Qwen3ForCausalLM(Qwen3Config(**cfg, attn_implementation="eager"))
    torch.set_default_dtype(torch.float32)
    model.load_state_dict(state, assign=True)
    model.eval().generation_config.eos_token_id = None
    ids = torch.tensor([prompt], device=device)

    def timed(n):
        sync()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             pad_token_id=0)
        sync()
        return time.perf_counter() - t0, out[0, len(prompt):].tolist()

    with torch.inference_mode():
        timed(2)
        t_prefill, _ = timed(1)
        t_full, tokens = timed(new_tokens + 1)
    return new_tokens / (t_full - t_prefill), tokens


def timed_generate(target, prompts, max_new_tokens: int, lookahead: bool = False,
                   make_proposer=None):
    """`generate` timed by an outside clock (time.perf_counter around the call, the device
    synchronized on both sides), the check on the engine's own counters: (output, seconds
    of the whole call, seconds of the same call at max_new_tokens=1, its prefill and first
    token). make_proposer: a fresh proposer for each call (None: AR)."""
    sync = torch.cuda.synchronize if target.device.type == "cuda" else (lambda: None)

    def timed(n: int):
        proposer = make_proposer() if make_proposer else None
        sync()
        start = time.perf_counter()
        out = generate(target, prompts, proposer=proposer, max_new_tokens=n,
                       lookahead=lookahead)
        sync()
        return out, time.perf_counter() - start

    out, seconds = timed(max_new_tokens)
    return out, seconds, timed(1)[1]


def oracle_tau(tau: float, block: int, largest: int) -> float:
    """The default oracle's mean commit length at block `block`: the geometric curve of mean
    `tau` at the largest block of the run, cut to `block` (a drafter keeps its per-position
    acceptance at a shorter block); `tau` itself at the largest."""
    if block == largest:
        return tau
    return 1 + sum(geometric_survival(tau, largest)[: block - 1])


def bench_batch(target, drafters: dict, prompts, args) -> list[dict]:
    """AR, then the method (default DFlash at oracle acceptance) at each block B of
    `drafters` ({B: drafter}) and each of `args.verify_schedules` side by side, at one batch
    size: one row per (B, schedule), each carrying the same AR runs. Every run follows a
    warm-up run as long as the timed ones.

    The warm-ups decode as far as the timed runs because requests finish at ragged rounds:
    the batch drops through smaller graph buckets (16 -> 8 -> 4 ...), and each new bucket
    costs CUDA-graph captures. A shorter warm-up would leave those captures inside the first
    timed run, the sync one. Overlap rounds drop a finished request a round later than sync
    ones, so they may meet batch shapes the sync runs did not: the method's lookahead run
    has a warm-up of its own."""
    new = args.new_tokens
    generate(target, prompts, max_new_tokens=new)
    ar = timed_generate(target, prompts, new)
    ahead = timed_generate(target, prompts, new, lookahead=True)
    return [_method_row(target, drafter, block, schedule, prompts, args, ar, ahead,
                        oracle_tau(args.tau, block, max(drafters)))
            for block, drafter in drafters.items() for schedule in args.verify_schedules]


def parse_schedules(text: str | None) -> list[str | None]:
    """--verify-schedule: JSON schedules joined by ';', "none" for none (every round at B)."""
    if text is None:
        return [None]
    return [None if part.strip().lower() == "none" else part.strip()
            for part in text.split(";")]


def _method_row(target, drafter, block: int, schedule: str | None, prompts, args, ar, ahead,
                tau: float) -> dict:
    """The method's sync and lookahead runs at block `block` and verify schedule `schedule`,
    each after a warm-up run of its own mode, against the AR runs `ar` and `ahead` (each
    `timed_generate`'s triple): one row of the bench. The row's tau_requested is `tau`,
    tau_realized the runs' own (sync, lookahead); at_tau_tok_s the tok/s at the requested
    tau (report.at_tau), and each run's `clock` the outside clock's tok/s beside the
    engine's (report.clock_check)."""
    new = args.new_tokens
    (ar, *ar_wall), (ahead, *ahead_ar_wall) = ar, ahead
    # the planned oracle's streams run B - 1 tokens past the end: its last round's drafts
    streams = generate(target, prompts, max_new_tokens=new + block - 1).tokens
    context = BuildContext(prompts, new, streams, drafter)
    # the default oracle corrupts drafts with a seed per batch size
    method = args.method or (f"oracle:tau={tau},block_size={block},shadow=true,"
                             f"seed={len(prompts)},plan=true"
                             + (f",verify_schedule={schedule}" if schedule else ""))
    def warm_then_timed(lookahead: bool):
        generate(target, prompts, proposer=build(method, target, context), max_new_tokens=new,
                 lookahead=lookahead)  # the warm-up of this mode
        return timed_generate(target, prompts, new, lookahead,
                              lambda: build(method, target, context))

    (spec, *spec_wall), (spec_ahead, *ahead_wall) = warm_then_timed(False), warm_then_timed(True)
    s = spec.stats

    def per_round(stats: dict, keys: tuple[str, ...], suffix: str = "") -> dict[str, float]:
        return {k: 1e3 * stats[f"{k}{suffix}_s"] / stats["rounds"] for k in keys}

    return {
        "bs": len(prompts),
        "block": block,
        "verify_schedule": schedule,
        "oracle_tau": tau,
        "ar_tok_s": ar.stats["tokens_per_s"],
        "ar_step_ms": 1e3 * ar.stats["decode_s"] / ar.stats["rounds"],
        "ar_lookahead_tok_s": ahead.stats["tokens_per_s"],
        "ar_lookahead_same_tokens": ahead.tokens == ar.tokens,
        "dflash_tok_s": s["tokens_per_s"],
        "tau": s["tau"],
        "round_ms": 1e3 * s["decode_s"] / s["rounds"],
        # the batch runs until its slowest request ends: rounds against each request's own
        "rounds": s["rounds"],
        "request_rounds_mean": sum(map(len, spec.accept_lengths)) / len(prompts),
        "request_rounds_max": max(map(len, spec.accept_lengths)),
        "round_efficiency": (s["draft_s"] + s["verify_s"]) / s["decode_s"],
        "speedup": s["tokens_per_s"] / ar.stats["tokens_per_s"],
        "speedup_over_lookahead": s["tokens_per_s"] / ahead.stats["tokens_per_s"],
        "dflash_lookahead_tok_s": spec_ahead.stats["tokens_per_s"],
        "dflash_lookahead_same_tokens": spec_ahead.tokens == spec.tokens,
        "dflash_full_batch_tok_s": full_batch_tok_s(spec, len(prompts)),
        "dflash_lookahead_full_batch_tok_s": full_batch_tok_s(spec_ahead, len(prompts)),
        "full_batch_split_ms": full_batch_split_ms(spec, len(prompts)),
        "full_batch_split_ms_lookahead": full_batch_split_ms(spec_ahead, len(prompts)),
        "split_ms": per_round(s, (*PHASES, "host")),
        # overlap rounds: "host" is the wall per round beyond its device phases (exposed)
        "split_ms_lookahead": per_round(spec_ahead.stats, (*PHASES, "host")),
        "round_ms_lookahead": 1e3 * spec_ahead.stats["decode_s"] / spec_ahead.stats["rounds"],
        # the host's ms per round to enqueue each phase: near its device time, the device
        # waited for the host inside that phase
        "enqueue_ms": per_round(s, PHASES, "_enqueue"),
        "enqueue_ms_lookahead": per_round(spec_ahead.stats, PHASES, "_enqueue"),
        "lossless": spec.tokens == ar.tokens,
        "tau_requested": tau,
        "tau_realized": s["tau"],
        "tau_realized_lookahead": spec_ahead.stats["tau"],
        "at_tau": at_tau(s["tokens_per_s"], tau, s["tau"]),
        "at_tau_lookahead": at_tau(spec_ahead.stats["tokens_per_s"], tau,
                                   spec_ahead.stats["tau"]),
        "clock": {"ar": clock_check(ar, *ar_wall),
                  "ar_lookahead": clock_check(ahead, *ahead_ar_wall),
                  "dflash": clock_check(spec, *spec_wall),
                  "dflash_lookahead": clock_check(spec_ahead, *ahead_wall)},
        "ar_tokens_head": ar.tokens[0][:32],
    }


SMOKE = "python -m workbench.bench --device cpu --preset tiny (batch 1, 8 new tokens)"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="qwen3-8b")
    p.add_argument("--batch-sizes", default=None, help="default 1,4,16,64 (CPU: 1)")
    p.add_argument("--prompt-len", type=int, default=None, help="default 512 (CPU: 32)")
    p.add_argument("--new-tokens", type=int, default=None, help="default 256 (CPU: 8)")
    p.add_argument("--block-size", default="16",
                   help="B of the shared drafter; a list (e.g. 8,10,16) runs each B side by "
                        "side against the same AR runs")
    p.add_argument("--verify-schedule", default=None,
                   help="the default oracle's drafts by batch size, JSON [lo, hi, K] rows, "
                        "e.g. [[1,15,15],[16,1024,9]] (Proposer.verify_schedule); several "
                        "joined by ';' ('none': every round at B) run side by side")
    p.add_argument("--tau", type=float, default=6.5, help="the default oracle's mean commit "
                   "length at the largest B (smaller B: its geometric curve cut to B)")
    p.add_argument("--method", default=None,
                   help="method spec against AR (default: oracle:tau=TAU,block_size=B,"
                        "shadow=true,seed=BS: DFlash's work at the oracle's acceptance)")
    p.add_argument("--hf-new-tokens", type=int, default=None,
                   help="default 32 (CPU: 8); 0 skips transformers")
    p.add_argument("--no-compile", action="store_true", help="eager layers inside the graphs")
    p.add_argument("--profile", action="store_true",
                   help="top kernels of bs-1 AR and DFlash decode")
    p.add_argument("--device", default="cuda", help="cpu: a quick smoke run of the script")
    p.add_argument("--ablate", action="store_true",
                   help="bs-1 AR only: every switch of workbench/bench/ablate.py VARIANTS")
    p.add_argument("--variants", default=None,
                   help="--ablate: comma-separated VARIANTS names (default: all)")
    p.add_argument("--ablate-unsplit-width", type=int, default=1024,
                   help="--ablate: the attention rule runs tables of width <= this unsplit")
    p.add_argument("--ablate-repeats", type=int, default=2)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks, under torchrun "
                   "--nproc-per-node N (reference/parallel.py; no transformers run)")
    p.add_argument("--out", default=None)
    engine_options.add_arguments(p)
    args = p.parse_args(argv)
    args.device = need_cuda(args.device, "python -m workbench.bench", SMOKE)
    for key, gpu, cpu in (("batch_sizes", "1,4,16,64", "1"), ("prompt_len", 512, 32),
                          ("new_tokens", 256, 8), ("hf_new_tokens", 32, 8)):
        if getattr(args, key) is None:  # a CPU smoke run by default on the CPU
            setattr(args, key, gpu if args.device.startswith("cuda") else cpu)
    if args.tp > 1 and args.ablate:
        p.error("--ablate runs on one device: drop --tp")
    tp = join(args.tp, args.device) if args.tp > 1 else None
    if tp is not None:
        args.device, args.hf_new_tokens = tp.device, 0
    opts = engine_options.from_args(args)
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    blocks = [int(x) for x in str(args.block_size).split(",")]
    args.verify_schedules = parse_schedules(args.verify_schedule)
    if args.method and (len(blocks) > 1 or args.verify_schedule):
        p.error("--method runs one method: give one --block-size and no --verify-schedule")
    args.block_sizes, args.block_size = blocks, max(blocks)  # --ablate, --profile: largest
    cfg = preset_config(args.preset)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, cfg.vocab_size, (max(sizes), args.prompt_len), generator=gen)
    prompts = prompts.tolist()
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    state = random_state_dict(cfg, device=args.device, dtype=dtype)
    result = stamp(args=vars(args), engine_options=opts.asdict(),
                   bound_tok_s=bound_tok_s(cfg))
    if cfg.num_experts:
        result["active_weight_bytes"] = active_weight_bytes(cfg)
    if args.ablate:
        return _ablate(args, cfg, prompts[0], dtype, state, result, opts)
    if args.hf_new_tokens:
        result["hf_tok_s"], hf_tokens = hf_decode_tok_s(args.preset, state, prompts[0],
                                                        args.hf_new_tokens, args.device, dtype)
        if cuda:
            torch.cuda.empty_cache()  # the transformers model is gone
    target = random_target(args.preset, device=args.device, dtype=dtype, state=state,
                           options=opts)
    if tp is not None:
        del state
        target = shard_target(target, tp)
    if cuda and not args.no_compile:
        target.enable_compile()
    drafters = {b: build(MethodSpec.of("dflash", random=args.preset, block_size=b), target)
                for b in blocks}
    drafter = drafters[max(blocks)]
    # The first call sizes the pool (draft layers, full context) for every later call.
    setup = build(MethodSpec.of("oracle", block_size=max(blocks), shadow=True), target,
                  BuildContext(streams=[[0]], drafter=drafter))
    generate(target, prompts[:1], proposer=setup, max_new_tokens=args.new_tokens)
    result["rows"] = [row for bs in sizes for row in bench_batch(target, drafters,
                                                                   prompts[:bs], args)]
    if args.hf_new_tokens and result["rows"][0]["bs"] == 1:
        head = result["rows"][0]["ar_tokens_head"]
        result["hf_matches_engine"] = hf_tokens[: len(head)] == head[: len(hf_tokens)]
    if cuda:  # which projections the tuner gave the Triton GEMV, and how it timed them
        from kernels.gemv import tune

        result["gemv_configs"] = {str(k): str(v or "cuBLAS (timed faster)")
                                  for k, v in tune.CONFIGS.items()}
        result["gemv_tune_us"] = {str(k): v for k, v in tune.TUNE_LOG.items()}
    print_result(result)
    if args.profile:
        _profile(target, prompts[0])
        _profile(target, prompts[0], drafter, args)
    if args.out and (tp is None or tp.rank == 0):
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _ablate(args, cfg, prompt: list[int], dtype, state: dict, result: dict, opts) -> dict:
    target = random_target(args.preset, device=args.device, dtype=dtype, state=state,
                           options=opts)
    if args.device == "cuda" and not args.no_compile:
        target.enable_compile()
    names = args.variants.split(",") if args.variants else None
    result["ablation"] = ablate(target, prompt, args.new_tokens, args.ablate_unsplit_width,
                                args.ablate_repeats, names)
    print_stamp(result)
    print_ablation(result["ablation"])
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _profile(target, prompt: list[int], drafter=None, args=None, new_tokens: int = 64) -> None:
    """Print the CUDA kernels of a bs-1 run (AR, or DFlash rounds at oracle acceptance with
    `drafter`; prefill included) by total time."""
    from torch.profiler import ProfilerActivity, profile

    cuda = target.device.type == "cuda"
    proposer = None
    if drafter is not None:
        ar = generate(target, [prompt], max_new_tokens=new_tokens)
        proposer = build(f"oracle:tau={args.tau},block_size={args.block_size},shadow=true",
                         target, BuildContext([prompt], new_tokens, ar.tokens, drafter))
        generate(target, [prompt], proposer=proposer, max_new_tokens=new_tokens)  # warm
    print(f"profile: bs 1, {new_tokens} new tokens, {'AR' if proposer is None else 'DFlash'}")
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        generate(target, [prompt], proposer=proposer, max_new_tokens=new_tokens)
    key = "cuda_time_total" if cuda else "cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=60)
    print(table)


if __name__ == "__main__":
    main()
