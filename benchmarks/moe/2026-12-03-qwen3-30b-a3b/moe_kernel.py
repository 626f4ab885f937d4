"""The fused MoE kernel by tokens per expert on Qwen3-30B-A3B's expert shapes (moe_kernel.json).

    python benchmarks/moe/2026-12-03-qwen3-30b-a3b/moe_kernel.py --out OUT/moe_kernel.json

On CUDA: this run's copy bandwidth and a large cuBLAS bf16 GEMM (the reachable matmul rate,
beside the 989.4 TFLOP/s datasheet peak the efficiencies divide by), then
kernels/fused_moe/bench.py `sweep`, and `tiles` (other tile shapes at a few points).
--device cpu runs the same code on tiny shapes under the Triton interpreter (the script's
smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

TINY = dict(experts=4, top_k=2, hidden=32, width=16)


def cublas_tflops(n: int = 8192) -> float:
    """Achieved TFLOP/s of one (n x n) @ (n x n) bf16 matmul (do_bench p50)."""
    import torch

    from kernels.timing import bench_us

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return 2 * n**3 / bench_us(lambda: a @ b).p50 / 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from common.stamps import stamp
    from kernels.fused_moe import bench

    if args.device == "cuda":
        from kernels.timing import copy_bandwidth

        copy_bw, shape, tokens = copy_bandwidth(), bench.SHAPE, bench.TOKENS_PER_EXPERT
        record = stamp(cublas_8192_tflops=cublas_tflops())
    else:
        copy_bw, shape, tokens = 1e10, TINY, (1, 2, 8)
        record = stamp(cublas_8192_tflops=None)
    record.update(bench.sweep(shape, tokens, device=args.device, copy_bw=copy_bw))
    points = bench.TILE_POINTS if args.device == "cuda" else (1,)
    record["tiles"] = bench.tiles(shape, points, device=args.device, copy_bw=copy_bw)
    Path(args.out).write_text(json.dumps(record, indent=1))
    for r in [*record["rows"], record["decode_bs1"], *record["tiles"]]:
        print(f"t={r['tokens_per_expert']:7.2f} M={r['tokens']:5d} kernel {r['kernel_us']:9.1f} us"
              f"  oracle {r['oracle_us']:10.1f} us  {r['speedup']:5.2f}x  "
              f"{r['frac_copy_bw']:6.1%} copy  {r['frac_bf16_peak']:6.1%} peak  {r['config']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
