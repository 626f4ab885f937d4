"""`python -m kernels.check`: every Triton kernel against its oracle on a few irregular shapes.

Runs on whatever device exists: CUDA if present, else the CPU under TRITON_INTERPRET=1 (set
here, before triton is imported). Prints a table of oracle agreement and exits 1 on any
disagreement. Token ids, counts and slots must match exactly; K/V follow the rules of
workbench/numerics.py (fp32: |d| <= 1e-4 + 1e-5 |ref|; fp16/bf16: the 2x rule against the
same-dtype oracle), restated here because `kernels` imports only torch and triton.
"""

from __future__ import annotations

import os
import sys
import time

import torch

TWO_X_EPS = {torch.bfloat16: 1e-3, torch.float16: 1e-4}
# Triton's CPU interpreter truncates fp32 -> bf16 (no round to nearest): allow one ulp there.
INTERPRETER_BF16_RTOL = 2.0**-7


def _merge(op: str, shape: str, dtype: str, parts: list[tuple[float, int, bool]]) -> tuple:
    """One table row for all outputs of one case."""
    return (op, shape, dtype, max(p[0] for p in parts), sum(p[1] for p in parts),
            all(p[2] for p in parts))


def _pick_device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


def _exact(got: torch.Tensor, want: torch.Tensor) -> tuple[float, int, bool]:
    bad = int((got != want).sum()) if got.shape == want.shape else max(got.numel(), 1)
    err = float((got - want).abs().max()) if got.numel() and got.shape == want.shape else 0.0
    return err, bad, bad == 0


def _close(got, want_fp32, want_low) -> tuple[float, int, bool]:
    """Agreement of a float output with its fp32 oracle (and the same-dtype oracle)."""
    if got.numel() == 0:
        return 0.0, 0, True
    diff = (got.double() - want_fp32.double()).abs()
    if got.dtype == torch.float32:
        bound = 1e-4 + 1e-5 * want_fp32.double().abs()
    elif got.dtype == torch.bfloat16 and got.device.type == "cpu":
        bound = INTERPRETER_BF16_RTOL * want_fp32.double().abs() + 1e-6
    else:
        low_err = float((want_low.double() - want_fp32.double()).abs().max())
        bound = torch.full_like(diff, 2 * low_err + TWO_X_EPS[got.dtype])
    bad = int((diff > bound).sum())
    return float(diff.max()), bad, bad == 0


def check_prepare_block(dev: str, bs: int, block: int, rows: int, width: int) -> tuple:
    from kernels import prepare_block, prepare_block_ref

    g = torch.Generator().manual_seed(bs * 1000 + block)
    args = (torch.randint(0, 1000, (bs,), generator=g),
            torch.randint(max(0, width - block - 3), width + 1, (bs,), generator=g),
            torch.randint(0, rows, (bs,), generator=g),
            torch.randint(1, 10_000, (rows, width), generator=g, dtype=torch.int32))
    args = tuple(a.to(dev) for a in args)
    kw = dict(block_size=block, mask_token_id=151_669)
    got, want = prepare_block(*args, **kw), prepare_block_ref(*args, **kw)
    return _merge("prepare_block", f"bs={bs} B={block} R={rows} W={width}", "int64",
                  [_exact(a, b) for a, b in zip(got, want)])


def check_accept_bonus(dev: str, bs: int, block: int) -> tuple:
    from kernels import accept_bonus, accept_bonus_ref

    g = torch.Generator().manual_seed(bs * 1000 + block)
    top1 = torch.randint(0, 3, (bs, block), generator=g)
    cand = torch.randint(0, 3, (bs, block), generator=g)
    agree = torch.rand(bs, block - 1, generator=g) < 0.8
    cand[:, 1:] = torch.where(agree, top1[:, :-1], cand[:, 1:])
    args = tuple(a.to(dev) for a in (cand, top1, torch.randint(0, 4096, (bs,), generator=g)))
    got, want = accept_bonus(*args), accept_bonus_ref(*args)
    return _merge("accept_bonus", f"bs={bs} B={block}", "int32/64",
                  [_exact(a, b) for a, b in zip(got, want)])


def check_kv_materialize(dev: str, dtype: torch.dtype, tokens: int, layers: int, nkv: int,
                         head_dim: int, rotary: int, block: int | None) -> tuple:
    from kernels import kv_materialize, kv_materialize_ref

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
    return _merge("kv_materialize", shape, str(dtype).removeprefix("torch."),
                  [_close(a, b, c) for a, b, c in zip(got, fp32, low)])


def check_paged_attention(dev: str, dtype: torch.dtype, bs: int, t: int, width: int,
                          window: int | None = None) -> tuple:
    """Ragged causal attention over a shuffled pool (nh=8, nkv=2, D=64), last row padding."""
    from kernels.paged_attention.kernel import paged_attention
    from kernels.paged_attention.ref import paged_attention_ref, paged_attention_sdpa

    g = torch.Generator().manual_seed(bs * 1000 + t)
    slots = 2 * bs * width + 1
    kv_lens = torch.randint(t, width + 1, (bs,), generator=g)
    kv_lens[-1] = 0
    pos = (kv_lens[:, None] - t + torch.arange(t)).clamp(min=0)
    ints = (torch.randperm(slots, generator=g)[: bs * width].view(bs, width).to(torch.int32),
            torch.arange(bs), pos, kv_lens)
    floats = [torch.randn(*s, generator=g) for s in ((bs, t, 8, 64), (slots, 2, 64),
                                                      (slots, 2, 64))]
    args = [f.to(dev, dtype) for f in floats] + [i.to(dev) for i in ints]
    kw = dict(causal=True, window=window)
    want = paged_attention_ref(*[a.float() if a.is_floating_point() else a for a in args], **kw)
    got = paged_attention(*args, **kw)
    low = paged_attention_sdpa(*args, **kw)
    return _merge("paged_attention", f"bs={bs} T={t} W={width} window={window}",
                  str(dtype).removeprefix("torch."), [_close(got, want, low)])


def run_all(dev: str) -> list[tuple]:
    """All rows (op, shape, dtype, max_abs_err, mismatches, ok) for device `dev`."""
    rows = []
    for bs, block, r, width in ((7, 13, 5, 40), (1, 16, 1, 15), (0, 8, 2, 8), (33, 1, 4, 9)):
        rows.append(check_prepare_block(dev, bs, block, r, width))
    for bs, block in ((9, 7), (3, 16), (1, 1), (20, 32)):
        rows.append(check_accept_bonus(dev, bs, block))
    for dtype, t, layers, nkv, d, rot, block in (
        (torch.float32, 24, 3, 3, 80, 40, None),
        (torch.bfloat16, 15, 2, 2, 128, 64, 5),
        (torch.float16, 21, 2, 5, 64, 64, 7),
        (torch.float32, 40, 1, 8, 32, 0, 8),
    ):
        rows.append(check_kv_materialize(dev, dtype, t, layers, nkv, d, rot, block))
    for dtype, bs, t, width, window in ((torch.float32, 3, 5, 40, None),
                                        (torch.float32, 2, 16, 33, 7)):
        rows.append(check_paged_attention(dev, dtype, bs, t, width, window))
    return rows


def main() -> int:
    dev = _pick_device()
    from rich.console import Console
    from rich.table import Table

    start = time.perf_counter()
    rows = run_all(dev)
    mode = "CUDA" if dev == "cuda" else "CPU, TRITON_INTERPRET=1"
    table = Table(title=f"Triton kernels vs PyTorch oracles ({mode}, "
                        f"{time.perf_counter() - start:.1f} s)")
    for col in ("op", "shape", "dtype", "max abs err", "mismatches", "ok"):
        table.add_column(col, justify="right" if col in ("max abs err", "mismatches") else "left")
    for op, shape, dtype, err, bad, ok in rows:
        table.add_row(op, shape, dtype, f"{err:.3g}", str(bad),
                      "[green]yes[/]" if ok else "[red]NO[/]")
    Console(width=max(100, Console().width)).print(table)
    return 0 if all(r[-1] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
