"""Benchmark of `prepare_block` against its oracle on the engine's batch and block sizes.

    python -m kernels.bench --ops prepare_block   # this op alone; without --ops: all

bs in {1, 64, 512} x B in {8, 16}, a (2*bs, 8192) int32 table, prefixes anywhere in it.
Bytes moved: the three (bs,) inputs, bs*B table entries read, three (bs, B) int64 outputs.
"""

from __future__ import annotations

import torch

from kernels.compare import exact, merge
from kernels.prepare_block.kernel import prepare_block
from kernels.prepare_block.ref import prepare_block_ref
from kernels.timing import Row, launch_bound_row

DEVICE = "cuda"
WIDTH = 8192
BATCHES, BLOCKS = (1, 64, 512), (8, 16)


# kernels.check's cases (on the CPU: the interpreter)
CHECKS = ((7, 13, 5, 40), (1, 16, 1, 15), (0, 8, 2, 8), (33, 1, 4, 9))
BENCH_CHECK = (37, 13, 50, 300)  # kernels.bench's check on CUDA before timing


def check(dev: str, bs: int, block: int, rows: int, width: int) -> tuple:

    g = torch.Generator().manual_seed(bs * 1000 + block)
    args = (torch.randint(0, 1000, (bs,), generator=g),
            torch.randint(max(0, width - block - 3), width + 1, (bs,), generator=g),
            torch.randint(0, rows, (bs,), generator=g),
            torch.randint(1, 10_000, (rows, width), generator=g, dtype=torch.int32))
    args = tuple(a.to(dev) for a in args)
    kw = dict(block_size=block, mask_token_id=151_669)
    got, want = prepare_block(*args, **kw), prepare_block_ref(*args, **kw)
    return merge("prepare_block", f"bs={bs} B={block} R={rows} W={width}", "int64",
                  [exact(a, b) for a, b in zip(got, want)])


def run(ctx) -> list[Row]:
    """One row per (bs, B) of the grid above.
    ctx: a kernels.bench.BenchContext (its launch floor is read)."""
    floor = ctx.floor
    rows = []
    for bs in BATCHES:
        for block in BLOCKS:
            g = torch.Generator(device=DEVICE).manual_seed(bs + block)
            table = torch.randint(1, 1 << 20, (2 * bs, WIDTH), device=DEVICE, generator=g,
                                  dtype=torch.int32)
            args = (torch.randint(0, 150_000, (bs,), device=DEVICE, generator=g),
                    torch.randint(0, WIDTH - block, (bs,), device=DEVICE, generator=g),
                    torch.randperm(2 * bs, device=DEVICE, generator=g)[:bs], table)
            kw = dict(block_size=block, mask_token_id=151_669)
            nbytes = 3 * bs * 8 + bs * block * 4 + 3 * bs * block * 8
            rows.append(launch_bound_row(
                "prepare_block", f"bs={bs} B={block}", "int64",
                lambda a=args, k=kw: prepare_block(*a, **k),
                lambda a=args, k=kw: prepare_block_ref(*a, **k), nbytes, floor))
    return rows
