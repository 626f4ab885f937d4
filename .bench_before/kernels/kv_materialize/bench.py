"""Benchmark of `kv_materialize` on the Qwen3-8B DFlash drafter's shapes.

    python -m kernels.bench --ops kv_materialize   # this op alone; without --ops: all

L=5 draft layers, nkv=8, D=128 (full rotary, R=128), H=4096, bf16, random distinct slots.

- decode, T = bs*16 for bs in {1, 8, 32}: end to end (GEMM + norm/RoPE/write) against the
  oracle's eager per-layer loop; target >= 3x.
- prefill, T = 8192: end to end against the oracle, and the norm+RoPE+write launch alone on
  a precomputed kv_all, whose bytes are one read of kv_all (fp32, as the GEMM leaves it),
  one write of K and V, and the positions, slots and cos/sin rows; target >= 60% of the
  copy bandwidth. The same launch on a bf16 kv_all (SGLang's intermediate) is reported
  too, and a sweep of rows per program x warps (each variant's output is compared with the
  default's: tile shapes change the fp32 reduction order, so a few K may differ by 1 ulp).
- the projection GEMM alone at T = 16, 512, 8192, as used and two alternatives.
"""

from __future__ import annotations

import torch

from kernels.compare import close, merge
from kernels.kv_materialize.kernel import kv_materialize, norm_rope_write, project_kv
from kernels.kv_materialize.ref import kv_materialize_ref
from kernels.timing import Row, bench_us

LAYERS, NKV, HEAD_DIM, HIDDEN, ROTARY = 5, 8, 128, 4096, 128
DTYPE = torch.bfloat16
DEVICE = "cuda"
DECODE_BATCHES, DECODE_BLOCK, PREFILL_TOKENS = (1, 8, 32), 16, 8192
SWEEP_ROWS, SWEEP_WARPS = (2, 4, 8, 16), (1, 2, 4)


def make_inputs(tokens: int, seed: int = 0) -> tuple[tuple, dict]:
    """(args, kwargs) of kv_materialize for `tokens` prefill-like tokens, on CUDA."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    dev, slots = DEVICE, 2 * tokens + 64
    angle = torch.rand(tokens + 64, ROTARY // 2, device=dev, generator=g) * 6.3
    args = (
        torch.randn(tokens, HIDDEN, device=dev, generator=g).to(DTYPE),
        (torch.randn(LAYERS, 2 * NKV * HEAD_DIM, HIDDEN, device=dev, generator=g) / 64).to(DTYPE),
        1 + 0.2 * torch.randn(LAYERS, HEAD_DIM, device=dev, generator=g),
        torch.cat([angle.cos(), angle.sin()], dim=1),
        torch.arange(tokens, device=dev) + 32,
        torch.randperm(slots, device=dev, generator=g)[:tokens],
        torch.randn(LAYERS, slots, NKV, HEAD_DIM, device=dev, generator=g).to(DTYPE),
        torch.randn(LAYERS, slots, NKV, HEAD_DIM, device=dev, generator=g).to(DTYPE),
    )
    return args, dict(eps=1e-6)


def write_bytes(tokens: int, kv_elem: int) -> int:
    """Bytes of the norm+RoPE+write launch: kv_all read, K/V written, token metadata."""
    kv = LAYERS * tokens * 2 * NKV * HEAD_DIM
    return kv * kv_elem + kv * DTYPE.itemsize + tokens * (8 + 8 + ROTARY * 4)


def end_to_end_bytes(tokens: int) -> int:
    """Fewest bytes end to end: hidden states and weights read, K/V and metadata."""
    weights = LAYERS * 2 * NKV * HEAD_DIM * HIDDEN * DTYPE.itemsize
    kv = LAYERS * tokens * 2 * NKV * HEAD_DIM * DTYPE.itemsize
    return tokens * HIDDEN * DTYPE.itemsize + weights + kv + tokens * (16 + ROTARY * 4)


def end_to_end_row(tokens: int, target: float | None) -> Row:
    args, kw = make_inputs(tokens)
    k = bench_us(lambda: kv_materialize(*args, **kw))
    o = bench_us(lambda: kv_materialize_ref(*args, **kw))
    met = None if target is None else o.p50 / k.p50 >= target
    return Row("kv_materialize", f"T={tokens} end to end", "bfloat16", k, o,
               end_to_end_bytes(tokens), {}, f">={target:g}x oracle" if target else "", met)


def norm_part_rows(tokens: int, copy_bw: float) -> tuple[list[Row], list[dict]]:
    """The launch alone on fp32 and bf16 kv_all, plus the (rows, warps) sweep on fp32."""
    args, kw = make_inputs(tokens)
    kv32 = project_kv(args[0], args[1])
    kv16 = kv32.to(DTYPE)
    rest = args[2:]
    launch = lambda kv, **o: norm_rope_write(kv, *rest, **kw, **o)  # noqa: E731
    rows = []
    for kv, name in ((kv32, "fp32"), (kv16, "bf16")):
        t = bench_us(lambda kv=kv: launch(kv))
        nbytes = write_bytes(tokens, kv.element_size())
        met = nbytes / (t.p50 * 1e-6) / copy_bw >= 0.6 if name == "fp32" else None
        rows.append(Row("kv norm+rope+write", f"T={tokens} kv_all {name}", "bfloat16", t, None,
                        nbytes, {}, ">=60% copy BW" if name == "fp32" else "", met))
    poison = args[6].clone(), args[7].clone()
    launch(kv32)
    want = args[6].float(), args[7].float()
    sweep = []
    for block_rows in SWEEP_ROWS:
        for warps in SWEEP_WARPS:
            args[6].copy_(poison[0])
            args[7].copy_(poison[1])
            launch(kv32, block_rows=block_rows, num_warps=warps)
            diff = max(float((p.float() - w).abs().max()) for p, w in zip(args[6:8], want))
            t = bench_us(lambda b=block_rows, w=warps: launch(kv32, block_rows=b, num_warps=w))
            sweep.append(dict(tokens=tokens, block_rows=block_rows, num_warps=warps, us=t.p50,
                              pct_copy=write_bytes(tokens, 4) / (t.p50 * 1e-6) / copy_bw * 100,
                              max_abs_diff_vs_default=diff))
    return rows, sweep


def gemm_rows(tokens: int) -> list[Row]:
    """The projection alone, as used (fp32 output) and two alternatives, for the record."""
    args, _ = make_inputs(tokens)
    x, w = args[0], args[1]
    flat = w.view(-1, HIDDEN).t()
    variants = {
        "mm fp32 out (used)": lambda: torch.mm(x, flat, out_dtype=torch.float32),
        "mm bf16 out": lambda: torch.mm(x, flat),
        "bmm fp32 out": lambda: torch.bmm(x.expand(LAYERS, *x.shape), w.transpose(1, 2),
                                          out_dtype=torch.float32),
    }
    rows = []
    for name, fn in variants.items():
        out_elem = 2 if "bf16" in name else 4
        nbytes = x.nbytes + w.nbytes + tokens * w.shape[0] * w.shape[1] * out_elem
        try:
            rows.append(Row("kv projection", f"T={tokens} {name}", "bfloat16", bench_us(fn),
                            None, nbytes, {}))
        except (RuntimeError, TypeError) as err:  # an overload this torch lacks
            print(f"kv projection {name}: {err}")
    return rows


CHECKS = (
    (torch.float32, 24, 3, 3, 80, 40, None),
    (torch.bfloat16, 15, 2, 2, 128, 64, 5),
    (torch.float16, 21, 2, 5, 64, 64, 7),
    (torch.float32, 40, 1, 8, 32, 0, 8),
)  # kernels.check's cases (CPU: the interpreter)
BENCH_CHECK = (torch.bfloat16, 39, 5, 8, 128, 96, 13)  # kernels.bench's check on CUDA before timing


def check(dev: str, dtype: torch.dtype, tokens: int, layers: int, nkv: int,
                         head_dim: int, rotary: int, block: int | None) -> tuple:

    g = torch.Generator().manual_seed(tokens * 100 + head_dim)
    hidden, slots, max_pos = 96, tokens + 5, 4 * tokens + 1
    angle = torch.rand(max_pos, rotary // 2, generator=g) * 6.3
    x = torch.randn(tokens, hidden, generator=g)
    w = torch.randn(layers, 2 * nkv * head_dim, hidden, generator=g) / hidden**0.5
    shared = [(1 + 0.2 * torch.randn(layers, head_dim, generator=g)).to(dev),
              torch.cat([angle.cos(), angle.sin()], 1).to(dev),
              torch.randint(0, max_pos, (tokens,), generator=g).to(dev),
              torch.randperm(slots, generator=g)[:tokens].to(dev)]
    poison = torch.randn(2, layers, slots, nkv, head_dim, generator=g).to(dev)
    commit = None if block is None else torch.randint(0, block + 1, (tokens // block,),
                                                      generator=g).to(dev)
    kw = dict(eps=1e-6, commit_lens=commit, block_size=block)

    def run(fn, in_dtype, math_dtype):
        pools = [p.to(in_dtype).to(math_dtype) for p in poison]
        xs = [t.to(dev, in_dtype).to(math_dtype) for t in (x, w)]
        fn(*xs, *shared, *pools, **kw)
        return pools

    got = run(kv_materialize, dtype, dtype)
    fp32, low = run(kv_materialize_ref, dtype, torch.float32), run(kv_materialize_ref, dtype, dtype)
    shape = (f"T={tokens} L={layers} nkv={nkv} D={head_dim} R={rotary}"
             + ("" if block is None else f" B={block}"))
    return merge("kv_materialize", shape, str(dtype).removeprefix("torch."),
                  [close(a, b, c) for a, b, c in zip(got, fp32, low)])


def run(ctx) -> list[Row]:
    """Decode and prefill rows and the projection alone; the prefill sweep goes to
    ctx.extras["kv_sweep"] (ctx: kernels.bench.BenchContext)."""
    rows = [end_to_end_row(bs * DECODE_BLOCK, 3.0) for bs in DECODE_BATCHES]
    rows.append(end_to_end_row(PREFILL_TOKENS, None))
    part, ctx.extras["kv_sweep"] = norm_part_rows(PREFILL_TOKENS, ctx.copy_bw)
    for tokens in (DECODE_BLOCK, DECODE_BATCHES[-1] * DECODE_BLOCK, PREFILL_TOKENS):
        part += gemm_rows(tokens)
    return rows + part
