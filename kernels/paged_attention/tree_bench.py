"""`python -m kernels.paged_attention.tree_bench`: a tree verify's attention, tiles against tall.

On Qwen3-8B's attention shapes (nh 32, nkv 8, D 128, bf16; `--device cpu`: nh 4, nkv 2,
D 16, fp32 under the interpreter, a smoke run), for each batch size and tree size N: a
random tree of N nodes (each node's parent drawn among the nodes before it) after `--context`
keys in a table of width `--width`, timed three ways as CUDA-graph replays
(kernels/timing.py graph_us; the CPU: one timed call):

- chain: the causal verify of N tokens without a mask (what a chain of the same token count
  costs);
- tiles: the tree through kernel.py's tree rule (16-row query tiles, the bool mask);
- tall: the tree through tree.py (EngineOptions.tall_tree: all N * G rows in one tile per
  KV head and split, one ancestor word per node).

Each row gives the three times in us, tall / tiles and tall / chain, and the largest
difference between the tall and tile outputs. Prints a table and writes `--out` JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import torch

from common.stamps import stamp
from kernels.paged_attention.kernel import paged_attention


def _inputs(bs: int, nodes: int, context: int, width: int, shape: tuple, dtype, device,
            seed: int = 0):
    """(args, mask): bs requests of context + nodes keys at random pool slots, the last
    nodes of them a random tree's nodes (queries), and its (bs, N, N) ancestor mask."""
    nh, nkv, d = shape
    g = torch.Generator().manual_seed(seed)
    slots = bs * width + 1
    table = torch.randperm(slots - 1, generator=g)[: bs * width].add(1).view(bs, width)
    mask = torch.zeros(bs, nodes, nodes, dtype=torch.bool)
    for b in range(bs):
        for i in range(nodes):  # node i sees its parent's path and itself
            if i:
                mask[b, i] = mask[b, int(torch.randint(0, i, (1,), generator=g))]
            mask[b, i, i] = True
    args = (torch.randn(bs, nodes, nh, d, generator=g), torch.randn(slots, nkv, d, generator=g),
            torch.randn(slots, nkv, d, generator=g))
    args = [a.to(dtype) for a in args] + [table.to(torch.int32), torch.arange(bs),
                                          context + torch.arange(nodes).expand(bs, -1),
                                          torch.full((bs,), context + nodes)]
    return [a.to(device) for a in args], mask.to(device)


def _time_us(fn, cuda: bool) -> float:
    if cuda:
        from kernels.timing import graph_us

        return graph_us(fn).p50
    fn()
    start = time.perf_counter()
    fn()
    return 1e6 * (time.perf_counter() - start)


def tree_rows(batches, budgets, context: int, width: int, device: str) -> list[dict]:
    """One row per (bs, N): chain, tiles and tall times (us) and the tall/tile difference."""
    cuda = device == "cuda"
    shape, dtype = ((32, 8, 128), torch.bfloat16) if cuda else ((4, 2, 16), torch.float32)
    rows = []
    for bs in batches:
        for nodes in budgets:
            args, mask = _inputs(bs, nodes, context, width, shape, dtype, device)
            calls = {name: functools.partial(paged_attention, *args, causal=True, **kw)
                     for name, kw in (("chain", {}), ("tiles", {"tree_mask": mask}),
                                      ("tall", {"tree_mask": mask, "tall_tree": True}))}
            us = {name: _time_us(fn, cuda) for name, fn in calls.items()}
            diff = (calls["tall"]().float() - calls["tiles"]().float()).abs().max().item()
            rows.append({"bs": bs, "nodes": nodes, "context": context, "width": width,
                         **{f"{k}_us": v for k, v in us.items()},
                         "tall_over_tiles": us["tall"] / us["tiles"],
                         "tall_over_chain": us["tall"] / us["chain"],
                         "tiles_over_chain": us["tiles"] / us["chain"],
                         "max_abs_diff_tall_tiles": diff})
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-sizes", default="1,4")
    p.add_argument("--budgets", default="32,64")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = tree_rows([int(x) for x in args.batch_sizes.split(",")],
                     [int(x) for x in args.budgets.split(",")], args.context, args.width,
                     args.device)
    result = stamp(args=vars(args), rows=rows)
    print(f"{'bs':>3} {'N':>3} {'chain us':>9} {'tiles us':>9} {'tall us':>9} "
          f"{'tall/tiles':>10} {'tall/chain':>10} {'tiles/chain':>11} {'max diff':>9}")
    for r in rows:
        print(f"{r['bs']:>3} {r['nodes']:>3} {r['chain_us']:>9.1f} {r['tiles_us']:>9.1f} "
              f"{r['tall_us']:>9.1f} {r['tall_over_tiles']:>10.3f} {r['tall_over_chain']:>10.3f}"
              f" {r['tiles_over_chain']:>11.3f} {r['max_abs_diff_tall_tiles']:>9.2e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
