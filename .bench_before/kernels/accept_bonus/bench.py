"""Benchmark of `accept_bonus` against its oracle on the H200 (the engine's decode shapes).

    python -m kernels.bench --ops accept_bonus   # this op alone; without --ops: all

bs in {1, 64, 512} x B in {8, 16}; drafts agree with the target's argmax 70% of the time.
Bytes moved: two (bs, B) int64 inputs and (bs,) prefixes read; (bs, B) int64 tokens and four
(bs,) outputs (2 x int32, 2 x int64) written.
"""

from __future__ import annotations

import torch

from kernels.accept_bonus.kernel import accept_bonus
from kernels.accept_bonus.ref import accept_bonus_ref
from kernels.compare import exact, merge
from kernels.timing import Row, launch_bound_row

DEVICE = "cuda"
BATCHES, BLOCKS = (1, 64, 512), (8, 16)


# kernels.check's cases (on the CPU: the interpreter)
CHECKS = ((9, 7), (3, 16), (1, 1), (20, 32))
BENCH_CHECK = (37, 13)  # kernels.bench's check on CUDA before timing


def check(dev: str, bs: int, block: int) -> tuple:

    g = torch.Generator().manual_seed(bs * 1000 + block)
    top1 = torch.randint(0, 3, (bs, block), generator=g)
    cand = torch.randint(0, 3, (bs, block), generator=g)
    agree = torch.rand(bs, block - 1, generator=g) < 0.8
    cand[:, 1:] = torch.where(agree, top1[:, :-1], cand[:, 1:])
    args = tuple(a.to(dev) for a in (cand, top1, torch.randint(0, 4096, (bs,), generator=g)))
    got, want = accept_bonus(*args), accept_bonus_ref(*args)
    return merge("accept_bonus", f"bs={bs} B={block}", "int32/64",
                  [exact(a, b) for a, b in zip(got, want)])


def run(ctx) -> list[Row]:
    """One row per (bs, B) of the grid above.
    ctx: a kernels.bench.BenchContext (its launch floor is read)."""
    floor = ctx.floor
    rows = []
    for bs in BATCHES:
        for block in BLOCKS:
            g = torch.Generator(device=DEVICE).manual_seed(bs + block)
            top1 = torch.randint(0, 150_000, (bs, block), device=DEVICE, generator=g)
            cand = torch.randint(0, 150_000, (bs, block), device=DEVICE, generator=g)
            agree = torch.rand(bs, block - 1, device=DEVICE, generator=g) < 0.7
            cand[:, 1:] = torch.where(agree, top1[:, :-1], cand[:, 1:])
            args = (cand, top1, torch.randint(0, 4096, (bs,), device=DEVICE, generator=g))
            nbytes = 2 * bs * block * 8 + bs * 8 + bs * block * 8 + bs * (4 + 4 + 8 + 8)
            rows.append(launch_bound_row(
                "accept_bonus", f"bs={bs} B={block}", "int64",
                lambda a=args: accept_bonus(*a), lambda a=args: accept_bonus_ref(*a),
                nbytes, floor))
    return rows
