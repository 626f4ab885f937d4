"""cuBLAS at 16-64 rows on Qwen3-8B projections: x @ W^T against (W @ x^T)^T (H200).

A tree verify at batch 1 runs its projections at 64 rows, where cuBLAS picks a split-K
kernel plus a reduction for down (4096 x 12288). The transposed call, W (N, K) @ x^T (K, M),
puts N on the output's long side and may take another kernel. Each row: `graph_us` of one
call per weight copy, cycling over enough copies that no weight stays in L2 (50 MB), against
the weight bytes at the copy bandwidth measured in the same process (a row faster than that
floor is a timing bug and stops the probe).

    PYTHONPATH=. python benchmarks/kernels/2026-12-02-skinny-linear/probe.py --out probe.json
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from common.stamps import stamp
from kernels.timing import copy_bandwidth, graph_us

SHAPES = {"wqkv": (6144, 4096), "wo": (4096, 4096), "gate_up": (24576, 4096),
          "down": (4096, 12288)}
VARIANTS = {
    "x @ W^T": lambda x, w: F.linear(x, w),
    "(W @ x^T)^T": lambda x, w: torch.mm(w, x.t()).t(),
    "(W @ x^T)^T contiguous": lambda x, w: torch.mm(w, x.t()).t().contiguous(),
}


def _cycling(fn, x: torch.Tensor, ws: list[torch.Tensor]):
    """A call of fn(x, w) that takes the next weight copy each time."""
    calls = iter(range(10**9))
    return lambda: fn(x, ws[next(calls) % len(ws)])


def main(argv=None) -> dict:
    """Print and return the rows; --out writes them as JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="16,32,64")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    bw = copy_bandwidth() / 1e12
    result = stamp(args=vars(args), copy_tb_s=bw, rows=[])
    print(f"copy bandwidth {bw:.2f} TB/s")
    for name, (n, k) in SHAPES.items():
        copies = max(2, -(-120 * 2**20 // (n * k * 2)))  # > 120 MB of weights in rotation
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        for m in map(int, args.rows.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(x, ws[0])
            for label, fn in VARIANTS.items():
                torch.testing.assert_close(fn(x, ws[0]).float(), ref.float(), rtol=0.02,
                                           atol=1.0)
                us = graph_us(_cycling(fn, x, ws), calls=copies * 4).p50
                floor = n * k * 2 / bw / 1e6
                if us < 0.98 * floor:  # faster than the weights can stream: a timing bug
                    raise RuntimeError(f"{name} M={m} {label}: {us:.2f} us is under the "
                                       f"{floor:.2f} us of streaming W at {bw:.2f} TB/s")
                row = dict(proj=name, m=m, variant=label, us=us, floor_us=floor)
                result["rows"].append(row)
                print(f"{name:8} M={m:3} {label:24} {us:7.2f} us  (floor {floor:.2f})")
        del ws
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
