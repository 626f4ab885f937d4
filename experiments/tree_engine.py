"""`python -m experiments.tree_engine`: what a tree round costs on the GPU against a chain round.

On Qwen3-8B-shaped random bf16 weights (`random:qwen3-8b`) with a drafter of the z-lab
Qwen3-8B-DFlash-b16 shapes (B = 16), at each batch size (requests with `--context` committed
tokens), in one run:

- forward: the target's forward (LM head and argmax included, CUDA graph) over 1 token (an
  AR step), the B = 16 chain block, and trees of N nodes with their ancestor masks;
- round: one whole engine round (`Engine.round`: draft, verify, accept, compaction or
  injection), the chain and a tree per N, replayed back to back (device-bound time; the tree
  round is two CUDA graphs per (batch bucket, N), reference/methods/dflash_tree.py);
- tok/s: bs * tau / round time, with tau(N) = tau_chain * r(N), r the tree/chain ratio
  measured on the toy zoo pair (experiments/tree_budget/results.json, greedy): a round's
  shapes do not depend on what is accepted, so this is what decoding at that acceptance
  gives; `--tau` sets tau_chain;
- the break-even budget: the largest N whose tok/s is at least the chain's;
- ops: the aten ops of one round run eagerly (reference/op_count.py), the kernels a round's
  CUDA graphs hold; a tree's count over the chain's is what building, masking, accepting
  and compacting it adds, each op a few microseconds of a graph replay.

`--tall-tiles 128x8,...` repeats the tree rows with the attention's taller query tiles
(kernels.paged_attention.rules.TALL_TILE: BLOCK_M x num_warps for launches of more than 64
query rows per KV head, which only the trees' verify has here), against the same chain.
`--profile` adds the top kernels of the batch-1 AR step, chain verify and N = 64 tree
verify forwards. `--pairs K` times each tree's forward against the chain's in K alternated
pairs (the ratio's median and spread, `forward_pairs`): the tree-over-chain target read
with its run-to-run noise. The engine option flags (common/engine_options.py, e.g. `--fused-merge`)
set the target's options for every row; `--early-loads` runs every row with the attention
kernel's EARLY_LOADS key loop (without it, the kernel's shape rule: the chain, not trees).
Prints a table and writes `--out` JSON. On the CPU (`--device cpu --preset tiny`) it is a
smoke run.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from common import engine_options
from common.stamps import stamp
from kernels.paged_attention import rules
from reference.cuda_graphs import GraphCache
from reference.engine import DecodeBatch, Engine, Runtime
from reference.methods import MethodSpec, build
from reference.model import ForwardBatch
from reference.op_count import OpCount
from reference.tree import Tree, build_tree, verify_tree
from reference.verify import Sampling
from workbench.calibrate.gpu import Bench

RATIOS = Path(__file__).parent / "tree_budget" / "results.json"


def tree_ratios(budgets: list[int]) -> dict[int, float]:
    """tau(N) / tau(chain) of the toy zoo pair at T = 0, for each N measured there."""
    rows = json.loads(RATIOS.read_text())["rows"]
    by_budget = {_budget(r["spec"]): r["tau"] for r in rows}
    return {n: by_budget[n] / by_budget[None] for n in budgets}


def _budget(spec: str) -> int | None:
    opts = dict(kv.split("=") for kv in spec.split(":", 1)[1].split(","))
    return int(opts["tree_budget"]) if "tree_budget" in opts else None


def _forward(bench: Bench, rows: list[int], tokens: int, kv: int, budget: int | None):
    """Seconds of one target forward + LM head + argmax over `tokens` per row (a tree of
    `budget` nodes with its ancestor mask when given, a causal block else), CUDA graph."""
    return bench.graphed(*_forward_call(bench, rows, tokens, kv, budget))


def _paired(bench: Bench, rows: list[int], kv: int, budget: int, pairs: int) -> dict:
    """The tree forward over the chain's (16 tokens), timed `pairs` times in alternation
    (chain, tree, chain, tree, ...: each `Bench.seconds`, a median of its reps) from two CUDA
    graphs captured once: a drift of the device's clocks or load over the run reaches both
    sides of a pair alike. Returns the pairs' ratios and their median, min and max."""
    chain, tree = (bench.replay(*_forward_call(bench, rows, tokens, kv, n))
                   for tokens, n in ((16, None), (budget, budget)))
    ratios = []
    for _ in range(pairs):
        before = bench.seconds(chain)
        ratios.append(bench.seconds(tree) / before)
    return {"ratios": ratios, "median": statistics.median(ratios), "min": min(ratios),
            "max": max(ratios)}


def _forward_call(bench: Bench, rows: list[int], tokens: int, kv: int, budget: int | None):
    """(fn, *inputs) of the forward `_forward` times."""
    n, dev, pool = len(rows), bench.dev, bench.pool
    req_rows = torch.as_tensor(rows, device=dev)
    prefix = torch.full((n,), kv, dtype=torch.int64, device=dev)
    vocab = bench.target.config.vocab_size
    if budget is not None:
        log_q = torch.randn(n, 15, vocab, device=dev).log_softmax(-1)
        tree = build_tree(prefix, log_q, budget, 4)
        fn = lambda *t: verify_tree(  # noqa: E731
            bench.target, pool, Tree(*t), req_rows, prefix, bench.layer_ids, 15)[0].argmax(-1)
        return (fn, *tree)
    ids = torch.randint(0, vocab, (n, tokens), device=dev)
    positions = (kv + torch.arange(tokens, device=dev)).expand(n, tokens).contiguous()
    cache_loc = pool.req_to_token[req_rows, kv:kv + tokens].long()
    capture = bench.layer_ids if tokens > 1 else ()

    def fn(ids, positions, cache_loc, req_rows, kv_lens):
        batch = ForwardBatch(positions, cache_loc, req_rows, kv_lens)
        hidden, _ = bench.target.forward(ids, batch, pool.req_to_token, pool.k, pool.v,
                                         capture=capture)
        return bench.target.logits(hidden).argmax(-1)

    return fn, ids, positions, cache_loc, req_rows, prefix + tokens


def _round(bench: Bench, rows: list[int], kv: int, budget: int | None,
           graphs: GraphCache) -> tuple[float, int]:
    """(seconds of one engine round, back-to-back replays from `graphs`; its aten ops run
    eagerly), the chain when budget is None."""
    spec = MethodSpec.of("dflash", weights_of=bench.drafters[16], block_size=16,
                         **({} if budget is None else {"tree_budget": budget}))
    n, dev = len(rows), bench.dev
    batch = DecodeBatch(torch.randint(0, bench.target.config.vocab_size, (n,), device=dev),
                        torch.full((n,), kv, dtype=torch.int64, device=dev),
                        torch.as_tensor(rows, device=dev), torch.ones(n, dtype=torch.int64,
                                                                      device=dev), n)
    eager = Engine(bench.target, build(spec, bench.target),
                   Runtime(bench.rt.pool, GraphCache(dev, enabled=False)), Sampling(), 0)
    with torch.inference_mode(), OpCount() as count:
        eager.round(batch)
    engine = Engine(bench.target, build(spec, bench.target),
                    Runtime(bench.rt.pool, graphs), Sampling(), 0)
    return bench.seconds(lambda: engine.round(batch)), count.ops


def _profile(bench: Bench, rows: list[int], kv: int) -> dict[str, list]:
    """Top kernels (name, us per call, calls per forward) of the bs-1 AR step, chain verify
    and N = 64 tree verify (its ancestor mask included), run eagerly (kernel times as in the
    graph, launch gaps not counted)."""
    from torch.profiler import ProfilerActivity, profile

    act = ProfilerActivity.CUDA if bench.cuda else ProfilerActivity.CPU
    out = {}
    for name, tokens, budget in (("ar_step", 1, None), ("chain_verify", 16, None),
                                 ("tree_verify_64", 64, 64)):
        fn, *inputs = _forward_call(bench, rows, tokens, kv, budget)
        for _ in range(3):
            fn(*inputs)  # warm: compilation, tuning
        with profile(activities=[act]) as prof:
            for _ in range(5):
                fn(*inputs)
            if bench.cuda:
                torch.cuda.synchronize()
        total = lambda e: e.device_time_total if bench.cuda else e.cpu_time_total  # noqa: E731
        ev = sorted(prof.key_averages(), key=lambda e: -total(e))[:25]
        out[name] = [(e.key[:80], round(total(e) / max(e.count, 1), 2), round(e.count / 5, 1))
                     for e in ev]
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="qwen3-8b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch-sizes", default="1,4,16,64")
    p.add_argument("--budgets", default="16,32,64,128")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--tau", type=float, default=6.5, help="the chain's tau at B = 16")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--tall-tiles", default="", help="e.g. 128x8,256x8 (BLOCK_M x warps)")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--pairs", type=int, default=0,
                   help="also time each tree forward against the chain's in this many "
                        "alternated pairs (the ratio's median and spread)")
    p.add_argument("--early-loads", action="store_true",
                   help="the attention kernel's EARLY_LOADS key loop in every row "
                   "(default: its shape rule)")
    p.add_argument("--out", default=None)
    engine_options.add_arguments(p)
    a = p.parse_args(argv)
    opts = engine_options.from_args(a)
    with rules.forced(early_loads=a.early_loads or None):  # None: the kernel's rule
        _run(a, opts)


def _run(a: argparse.Namespace, opts: engine_options.EngineOptions) -> None:
    budgets = [int(x) for x in a.budgets.split(",")]
    early = a.early_loads or None  # each `forced` block below sets every switch it holds
    tiles = [None] + [tuple(int(v) for v in t.split("x")) for t in a.tall_tiles.split(",") if t]
    ratios = tree_ratios(budgets)
    bench = Bench(a.preset, device=a.device, blocks=[16], context_len=a.context + 160,
                  max_requests=max(int(x) for x in a.batch_sizes.split(",")), reps=a.reps,
                  budget_s=1e9, compile_layers=a.device == "cuda", options=opts)
    result = {**stamp(), "args": vars(a), "engine_options": opts.asdict(), "ratios": ratios,
              "rows": []}
    print(f"{'bs':>3} {'what':>16} {'fwd ms':>8} {'x AR':>6} {'x B16':>6} {'round ms':>9} "
          f"{'tau':>5} {'tok/s':>8} {'x chain':>7} {'ops':>5}")
    for bs in (int(x) for x in a.batch_sizes.split(",")):
        with bench.rows(bs, a.context + 160) as rows:
            ar = _forward(bench, rows, 1, a.context, None)
            chain_fwd = _forward(bench, rows, 16, a.context, None)
            cases = [("chain", None, None, chain_fwd, a.tau)]
            for tile in tiles:  # a graph keeps the tile it was captured with
                name = "" if tile is None else f" {tile[0]}x{tile[1]}"
                with rules.forced(tall_tile=tile, early_loads=early):
                    cases += [(f"N={n}{name}", n, tile, _forward(bench, rows, n, a.context, n),
                               a.tau * ratios[n]) for n in budgets]
            chain_tok_s = None
            for what, n, tile, fwd, tau in cases:
                with rules.forced(tall_tile=tile, early_loads=early):
                    rnd, ops = _round(bench, rows, a.context, n, GraphCache(bench.dev))
                tok_s = bs * tau / rnd
                chain_tok_s = chain_tok_s or tok_s
                row = {"bs": bs, "what": what, "budget": n, "tall_tile": tile,
                       "forward_ms": fwd * 1e3,
                       "ar_step_ms": ar * 1e3, "round_ms": rnd * 1e3, "tau": tau,
                       "tok_s": tok_s, "vs_chain": tok_s / chain_tok_s, "ops": ops}
                result["rows"].append(row)
                print(f"{bs:>3} {what:>16} {fwd * 1e3:>8.3f} {fwd / ar:>6.2f} "
                      f"{fwd / chain_fwd:>6.2f} {rnd * 1e3:>9.3f} {tau:>5.2f} {tok_s:>8.1f} "
                      f"{tok_s / chain_tok_s:>7.2f} {ops:>5}")
            for row in result["rows"]:
                if a.pairs and row["bs"] == bs and row["budget"] and row["tall_tile"] is None:
                    with rules.forced(early_loads=early):
                        row["forward_pairs"] = _paired(bench, rows, a.context, row["budget"],
                                                       a.pairs)
                    q = row["forward_pairs"]
                    print(f"{bs:>3} {row['what']:>16} forward / chain over {a.pairs} "
                          f"alternated pairs: median {q['median']:.3f} "
                          f"({q['min']:.3f}-{q['max']:.3f})")
            even = [r["budget"] for r in result["rows"]
                    if r["bs"] == bs and r["budget"] and r["tall_tile"] is None
                    and r["vs_chain"] >= 1.0]
            result.setdefault("break_even", {})[bs] = max(even) if even else None
            if a.profile and bs == 1:
                result["profile"] = _profile(bench, rows, a.context)
    print("break-even budget per batch size:", result["break_even"])
    if "profile" in result:
        for name, top in result["profile"].items():
            print(f"\n{name}: top kernels (us per call, calls per forward)")
            for k, us, c in top:
                print(f"  {us:>9.2f} {c:>6} {k}")
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
