"""Benchmark of `fused_moe` against its oracle on Qwen3-30B-A3B's expert shapes (bf16).

    python -m kernels.bench --ops fused_moe

E = 128 experts, k = 8, H = 2048, F = 768. `sweep` times the kernel by tokens per expert t
(balanced routing: token m goes to experts m*k .. m*k+k-1 mod E, so each expert gets t of
the M = t*E/k tokens) and `decode_point` the bs-1 decode step (one token, k experts of one
token each). Bytes: the weights of the experts hit (w_gate_up and w_down rows once), x read
and the output written; FLOPs: 6 * M*k * F * H (gate-up 2*2F*H and down 2*F*H per pair).
Targets (issue 46): >= 70% of the copy bandwidth at <= 2 tokens per expert, >= 45% of bf16
dense peak at >= 256, >= 1.5x over the oracle (transformers' per-expert loop) everywhere.
"""

from __future__ import annotations

import time

import torch

from kernels.compare import close, merge
from kernels.fused_moe.kernel import MoeConfig, default_config, fused_moe
from kernels.fused_moe.ref import fused_moe_ref
from kernels.timing import Row

SHAPE = dict(experts=128, top_k=8, hidden=2048, width=768)  # Qwen3-30B-A3B
TOKENS_PER_EXPERT = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BF16_PEAK_FLOPS = 989.4e12  # H200 SXM dense bf16, datasheet
# other tiles timed at a few points (`tiles`): data for tuning default_config
TILE_CANDIDATES = (MoeConfig(16, 64, 128, 4, 4), MoeConfig(16, 32, 256, 4, 3),
                   MoeConfig(32, 64, 128, 4, 3), MoeConfig(64, 128, 64, 4, 3),
                   MoeConfig(128, 128, 64, 8, 3), MoeConfig(128, 64, 64, 4, 4))
TILE_POINTS = (1, 16, 256)

# kernels.check's cases (on the CPU: the interpreter): (M, E, k, H, F)
CHECKS = ((5, 4, 2, 24, 20), (0, 3, 1, 16, 16))
BENCH_CHECK = (40, 16, 4, 256, 128)  # kernels.bench's check on CUDA before timing


def problem(m: int, experts: int, top_k: int, hidden: int, width: int, device: str,
            dtype=torch.bfloat16, balanced: bool = True, seed: int = 0):
    """(x, w_gate_up, w_down, topk_weights, topk_ids) of M tokens; balanced: the routing of
    the module docstring, else a random top-k of softmax scores."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, hidden, device=device, generator=g).to(dtype)
    w_gate_up = (torch.randn(experts, 2 * width, hidden, device=device, generator=g)
                 / hidden**0.5).to(dtype)
    w_down = (torch.randn(experts, hidden, width, device=device, generator=g)
              / width**0.5).to(dtype)
    scores = torch.rand(m, experts, device=device, generator=g).softmax(-1)
    weights, ids = scores.topk(top_k, dim=-1)
    if balanced:
        ids = (torch.arange(m * top_k, device=device) % experts).view(m, top_k)
    return x, w_gate_up, w_down, (weights / weights.sum(-1, keepdim=True)).to(dtype), ids


def check(dev: str, m: int, experts: int, top_k: int, hidden: int, width: int) -> tuple:
    """kernels.check-style tuple: random routing against the oracle (2x rule in bf16 on
    CUDA; fp32 under the interpreter, whose truncating casts of the bf16 intermediate are
    beyond the one-ulp allowance of kernels.compare)."""
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    args = problem(m, experts, top_k, hidden, width, dev, dtype, balanced=False, seed=1)
    fp32 = fused_moe_ref(*(a.float() if a.is_floating_point() else a for a in args))
    return merge("fused_moe", f"M={m} E={experts} k={top_k} H={hidden} F={width}",
                 str(dtype).removeprefix("torch."),
                 [close(fused_moe(*args), fp32, fused_moe_ref(*args))])


def _time_us(fn, cuda: bool) -> float:
    """Median microseconds per call: do_bench (L2 flushed) on CUDA, the host clock else."""
    if cuda:
        from kernels.timing import bench_us

        return bench_us(fn).p50
    fn()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e6


def measure(m: int, shape: dict, device: str, copy_bw: float, peak: float,
            balanced: bool = True, config: MoeConfig | None = None,
            oracle: bool = True) -> dict:
    """One point: kernel (tiles `config`, None: default_config) and oracle time, bytes,
    FLOPs and their fractions of the ceilings."""
    e, k, h, f = shape["experts"], shape["top_k"], shape["hidden"], shape["width"]
    args = problem(m, e, k, h, f, device, balanced=balanced)
    cuda = device == "cuda"
    kernel_us = _time_us(lambda: fused_moe(*args, config=config), cuda)
    oracle_us = _time_us(lambda: fused_moe_ref(*args), cuda) if oracle else float("nan")
    hit = int(torch.unique(args[4]).numel())
    nbytes = 2 * (hit * 3 * f * h + 2 * m * h)
    flops = 6 * m * k * f * h
    return dict(tokens=m, tokens_per_expert=m * k / e, experts_hit=hit,
                config=str(config or default_config(m * k, e)), kernel_us=kernel_us,
                oracle_us=oracle_us,
                speedup=oracle_us / kernel_us, bytes=nbytes, flops=flops,
                tbps=nbytes / kernel_us / 1e6, frac_copy_bw=nbytes / (kernel_us * 1e-6) / copy_bw,
                tflops=flops / kernel_us / 1e6, frac_bf16_peak=flops / (kernel_us * 1e-6) / peak)


def sweep(shape: dict = SHAPE, tokens_per_expert=TOKENS_PER_EXPERT, *, device: str = "cuda",
          copy_bw: float, peak: float = BF16_PEAK_FLOPS) -> dict:
    """The balanced points by tokens per expert, the bs-1 decode point, and the efficiency
    curve the simulator reads ({"tokens_per_expert": [...], "efficiency": [...]})."""
    rows = [measure(t * shape["experts"] // shape["top_k"], shape, device, copy_bw, peak)
            for t in tokens_per_expert]
    decode = measure(1, shape, device, copy_bw, peak, balanced=False)
    return dict(shape=shape, copy_bw_tbps=copy_bw / 1e12, bf16_peak_tflops=peak / 1e12,
                rows=rows, decode_bs1=decode,
                moe_experts={"tokens_per_expert": [r["tokens_per_expert"] for r in rows],
                             "efficiency": [r["frac_bf16_peak"] for r in rows]})


def tiles(shape: dict = SHAPE, points=TILE_POINTS, *, device: str = "cuda", copy_bw: float,
          peak: float = BF16_PEAK_FLOPS) -> list[dict]:
    """The kernel alone under each of TILE_CANDIDATES at `points` tokens per expert."""
    return [measure(t * shape["experts"] // shape["top_k"], shape, device, copy_bw, peak,
                    config=c, oracle=False) for t in points for c in TILE_CANDIDATES]


def run(ctx) -> list[Row]:
    """Rows at 1, 16 and 256 tokens per expert (ctx: a kernels.bench.BenchContext)."""
    from kernels.timing import bench_us

    rows = []
    for t in (1, 16, 256):
        m = t * SHAPE["experts"] // SHAPE["top_k"]
        args = problem(m, *SHAPE.values(), "cuda")
        point = measure(m, SHAPE, "cuda", ctx.copy_bw, BF16_PEAK_FLOPS)
        target, met = ((">= 70% copy bw", point["frac_copy_bw"] >= 0.7) if t <= 2 else
                       (">= 45% bf16 peak", point["frac_bf16_peak"] >= 0.45) if t >= 256 else
                       (">= 1.5x oracle", point["speedup"] >= 1.5))
        rows.append(Row("fused_moe", f"E=128 k=8 H=2048 F=768 t={t}", "bfloat16",
                        bench_us(lambda a=args: fused_moe(*a)),
                        bench_us(lambda a=args: fused_moe_ref(*a)), point["bytes"], point,
                        target, met and point["speedup"] >= 1.5))
    return rows
