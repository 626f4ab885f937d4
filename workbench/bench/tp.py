"""`torchrun --nproc-per-node N -m workbench.bench.tp --tp N`: decode speed under tensor
parallelism (reference/parallel.py), AR and DFlash by batch size, with the all-reduce time.

On random weights of `--preset` (Qwen3-8B shapes by default), for each batch size: plain
autoregressive decode (AR), then DFlash with a random drafter of the preset's shapes whose
drafts are replaced by the oracle's at mean commit length `--tau` (the round costs are
DFlash's, the acceptance is controlled; as `python -m workbench.bench`), with the drafter
sharded like the target, kept whole on every rank, or both (`--tp-drafter`). Each run
follows a warm-up run of the same shape. `--tp 1` runs one process without
torch.distributed (the baseline).

All-reduce time per round: the collectives a round issues on each rank, timed alone at their
message sizes (one all-reduce of (bs*T, H) per o and down projection of every layer: the
target's forward of T = 1 (AR) or B (verify), a sharded drafter's of B, and the broadcast of
the accepted tokens), inside one CUDA graph of `--collective-reps` each on CUDA (the engine
replays its rounds as graphs). Rank 0 prints a table and one JSON line; --out writes the JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable

import torch

from common import engine_options
from common.stamps import stamp
from reference.generate import generate
from reference.loaders import preset_config, random_target
from reference.methods import BuildContext, MethodSpec, build
from reference.parallel import TensorParallel, init, shard_target


def join(size: int, device: str, drafter: str = "shard") -> TensorParallel:
    """Join the torchrun group of `size` ranks on `device`'s type; ranks other than 0 stop
    printing. Raises ValueError as reference.parallel.init does."""
    tp = init(size, torch.device(device).type, drafter)
    if tp.rank:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the process's stdout from now on)
    return tp


def collective_ms(run: Callable[[], None], cuda: bool, reps: int) -> float:
    """Milliseconds per call of `run` (one collective on fixed buffers): `reps` calls captured
    in one CUDA graph and replayed on CUDA, a timed loop on the CPU."""
    run()
    if not cuda:
        t0 = time.perf_counter()
        for _ in range(reps):
            run()
        return 1e3 * (time.perf_counter() - t0) / reps
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            run()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (5 * reps)


def round_collectives_ms(target, bs: int, tokens: int, draft_layers: int, args) -> float:
    """All-reduce and broadcast ms a round of bs requests issues per rank: 2 all-reduces of
    (bs*tokens, H) per target layer and per sharded draft layer (draft_layers), and the
    accepted tokens' broadcast. 0 without tensor parallelism."""
    tp = target.tp
    if tp is None:
        return 0.0
    cuda = target.device.type == "cuda"
    x = torch.zeros(bs * tokens, target.config.hidden_size, dtype=target.dtype,
                    device=target.device)
    accepted = (torch.zeros(bs, tokens + 3, dtype=torch.long, device=target.device),)
    reduce_ms = collective_ms(lambda: tp.all_reduce(x), cuda, args.collective_reps)
    broadcast_ms = collective_ms(lambda: tp.broadcast(accepted), cuda, args.collective_reps)
    return 2 * (target.config.num_layers + draft_layers) * reduce_ms + broadcast_ms


def ar_run(target, prompts: list[list[int]], args) -> dict:
    """AR at one batch size after a warm-up run: its output, ms per step, all-reduce ms."""
    generate(target, prompts, max_new_tokens=args.new_tokens)
    out = generate(target, prompts, max_new_tokens=args.new_tokens)
    return {"out": out, "step_ms": 1e3 * out.stats["decode_s"] / out.stats["rounds"],
            "allreduce_ms": round_collectives_ms(target, len(prompts), 1, 0, args)}


def dflash_row(target, drafter, prompts: list[list[int]], ar: dict, args) -> dict:
    """DFlash at oracle acceptance (shadowing `drafter`) after a warm-up run, against `ar`
    (`ar_run` at the same batch): one row of the bench."""
    new, bs, block = args.new_tokens, len(prompts), args.block_size
    method = f"oracle:tau={args.tau},block_size={block},shadow=true,seed={bs}"
    context = BuildContext(prompts, new, ar["out"].tokens, drafter)
    for _ in range(2):  # warm-up, then timed
        spec = generate(target, prompts, proposer=build(method, target, context),
                        max_new_tokens=new)
    s, a = spec.stats, ar["out"].stats
    round_ms = 1e3 * s["decode_s"] / s["rounds"]
    d = drafter.drafter
    coll = round_collectives_ms(target, bs, block,
                                d.config.model.num_layers if d.shards > 1 else 0, args)
    return {
        "tp": args.tp, "bs": bs,
        "drafter": "whole" if target.tp is None else target.tp.drafter,
        "ar_tok_s": a["tokens_per_s"], "ar_step_ms": ar["step_ms"],
        "ar_allreduce_ms": ar["allreduce_ms"],
        "ar_allreduce_frac": ar["allreduce_ms"] / ar["step_ms"],
        "dflash_tok_s": s["tokens_per_s"], "round_ms": round_ms, "tau": s["tau"],
        "dflash_allreduce_ms": coll, "dflash_allreduce_frac": coll / round_ms,
        "speedup": s["tokens_per_s"] / a["tokens_per_s"],
        "lossless": spec.tokens == ar["out"].tokens,
    }


def bench(target, prompts: list[list[int]], sizes: list[int], args,
          save: Callable[[list[dict]], None]) -> list[dict]:
    """AR at every batch size, then DFlash at every batch size under each drafter
    placement (one drafter per placement, built once); `save` gets the rows so far after
    each (a run cut short keeps them)."""
    ar = {bs: ar_run(target, prompts[:bs], args) for bs in sizes}
    rows = []
    for placement in args.placements:
        t = _placed(target, placement)
        drafter = build(MethodSpec.of("dflash", random=args.preset,
                                      block_size=args.block_size), t)
        for bs in sizes:
            rows.append(dflash_row(t, drafter, prompts[:bs], ar[bs], args))
            save(rows)
        target = _handed_back(t, target)
    return rows


def _placed(target, placement: str):
    """The target whose proposers place their drafter as `placement` says (the same weights;
    its KV pool moves over, rebuilt when the draft pool's heads differ)."""
    if target.tp is None or target.tp.drafter == placement:
        return target
    moved = dataclasses.replace(target, tp=dataclasses.replace(target.tp, drafter=placement))
    target.runtime = None
    return moved


def _handed_back(used, target):
    """`target` with the runtime `used` (a `_placed` copy) ended with."""
    if used is not target:
        target.runtime, used.runtime = used.runtime, None
    return target


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--tp-drafter", choices=("shard", "replicate", "both"), default="both")
    p.add_argument("--preset", default="qwen3-8b")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--tau", type=float, default=6.4, help="the oracle's mean commit length")
    p.add_argument("--collective-reps", type=int, default=20)
    p.add_argument("--compile", action="store_true", help="torch.compile the layers (CUDA)")
    p.add_argument("--device", default="cuda", help="cpu: gloo, a smoke run of the script")
    p.add_argument("--out", default=None)
    engine_options.add_arguments(p)
    args = p.parse_args(argv)
    args.placements = ["shard", "replicate"] if args.tp_drafter == "both" else [args.tp_drafter]
    if args.tp == 1:
        args.placements = ["shard"]
    tp = join(args.tp, args.device) if args.tp > 1 else None
    device = tp.device if tp is not None else args.device
    cuda = device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    gen = torch.Generator().manual_seed(0)
    cfg = preset_config(args.preset)
    prompts = torch.randint(0, cfg.vocab_size, (max(sizes), args.prompt_len),
                            generator=gen).tolist()
    target = random_target(args.preset, device=device, dtype=dtype,
                           options=engine_options.from_args(args))
    if tp is not None:
        target = shard_target(target, tp)
        if cuda:
            torch.cuda.empty_cache()  # the whole layers are gone
    if cuda and args.compile:
        target.enable_compile()
    result = stamp(args=vars(args), engine_options=target.options.asdict())

    def save(rows: list[dict]) -> None:
        result["rows"] = rows
        if args.out and (tp is None or tp.rank == 0):
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)

    bench(target, prompts, sizes, args, save)
    _print(result["rows"])
    print(json.dumps(result))
    return result


def _print(rows: list[dict]) -> None:
    print(f"{'tp':>3} {'bs':>3} {'drafter':>9} {'AR tok/s':>9} {'AR AR%':>7} "
          f"{'DFlash tok/s':>12} {'tau':>5} {'round ms':>8} {'DF AR%':>7} {'speedup':>7}")
    for r in rows:
        print(f"{r['tp']:>3} {r['bs']:>3} {r['drafter']:>9} {r['ar_tok_s']:>9.1f} "
              f"{100 * r['ar_allreduce_frac']:>6.1f}% {r['dflash_tok_s']:>12.1f} "
              f"{r['tau']:>5.2f} {r['round_ms']:>8.2f} {100 * r['dflash_allreduce_frac']:>6.1f}% "
              f"{r['speedup']:>6.2f}x")


if __name__ == "__main__":
    main()
