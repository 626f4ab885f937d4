"""Benchmark of `paged_attention` on Qwen3-8B's attention shapes (nh=32, nkv=8, D=128, bf16).

    python -m kernels.bench --ops paged_attention   # this op alone; without --ops: all

Decode (T = 1) and DFlash verify (T = 16) at bs in {1, 16, 64}, 1024 keys per request at
random pool slots. The oracle gathers each request's row of K/V and runs the softmax in fp32;
the kernel reads K/V in place. Bytes: each visible K/V row read once, q read, out written.

Short-context rule (`unsplit_max_width`): bs 1 decode, kv_len in {256, 512, 768, 1024}
keys of a table of width 704 or 1024 (the engine bench's), as CUDA-graph replays: split-K (8
splits + the merge launch, the default) against unsplit (the rule on), kernel-only time.

Fused merge (`fused_merge`): bs 1 decode, kv_len 256..4096 in tables of width 704 (8
splits) and 32768 (64 splits, most of them empty at short contexts), as CUDA-graph replays:
split programs that merge themselves against split-K + the merge launch.

Split count: bs 1 decode, kv_len 512 and 768 in a table of width 832, 2 / 4 / 16 / 32
forced splits against `num_splits`' 8: at batch 1 the attention and its merge launch are a
visible share of a decode step, so the split count is worth checking per context length.

Key tile: bs 1 decode, kv_len 768 in a table of width 832 (the engine bench's step), BLOCK_N
32 / 64 / 128 keys per loop step at 4, 8 and 16 splits against the default (32 keys,
`num_splits`' choice): at batch 1 each split walks its keys in a few dependent steps of
gathered loads, and the attention with its merge costs ~11 us a layer for 3 MB of K/V.

Tree verify: bs 1, a 64-node tree (T = 64, its ancestor mask) after 512 context keys in a
table of width 832 (experiments/tree_engine.py's shape), each split count 1..16 with and
without the fused merge against `num_splits`' choice (two launches): the 64-query verify
costs twice the 16-query chain verify's attention, the first place to look for its time.

Early loads (`EARLY_LOADS`): the engine's shapes (decode, 16-token verify at bs 1 and 16,
the 64-node tree) with each step's V load issued beside its K load and the next step's
slots loaded during this one, against the plain loop; outputs bitwise equal.
"""

from __future__ import annotations

import torch

from kernels.compare import close, merge
from kernels.paged_attention import rules
from kernels.paged_attention.kernel import paged_attention
from kernels.paged_attention.ref import paged_attention_ref, paged_attention_sdpa
from kernels.timing import Row, bench_us, graph_us

NH, NKV, HEAD_DIM, KV_LEN = 32, 8, 128, 1024
DTYPE, DEVICE = torch.bfloat16, "cuda"
BATCHES, QUERY_LENS = (1, 16, 64), (1, 16)
LAUNCH = dict(unsplit_max_width=0, fused_merge=False)  # the main rows' switches (defaults)


def make_inputs(bs: int, t: int, seed: int = 0, kv_len: int = KV_LEN,
                width: int = KV_LEN) -> tuple[tuple, dict]:
    """(args, kwargs) for bs requests of kv_len keys (table width >= kv_len) whose last t are
    the queries."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    slots = bs * width + 1
    table = torch.randperm(slots, device=DEVICE, generator=g)[: bs * width].view(bs, width)
    kv_lens = torch.full((bs,), kv_len, device=DEVICE)
    args = (
        torch.randn(bs, t, NH, HEAD_DIM, device=DEVICE, generator=g).to(DTYPE),
        torch.randn(slots, NKV, HEAD_DIM, device=DEVICE, generator=g).to(DTYPE),
        torch.randn(slots, NKV, HEAD_DIM, device=DEVICE, generator=g).to(DTYPE),
        table.to(torch.int32),
        torch.arange(bs, device=DEVICE),
        (kv_len - t + torch.arange(t, device=DEVICE)).expand(bs, t).contiguous(),
        kv_lens,
    )
    return args, dict(causal=True)


# kernels.check's cases (on the CPU: the interpreter)
CHECKS = ((torch.float32, 3, 5, 40, None), (torch.float32, 2, 16, 33, 7))
BENCH_CHECK = (torch.bfloat16, 5, 16, 300, 64)  # kernels.bench's check on CUDA before timing


def check(dev: str, dtype: torch.dtype, bs: int, t: int, width: int,
                          window: int | None = None) -> tuple:
    """Ragged causal attention over a shuffled pool (nh=8, nkv=2, D=64), last row padding."""

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
    return merge("paged_attention", f"bs={bs} T={t} W={width} window={window}",
                  str(dtype).removeprefix("torch."), [close(got, want, low)])


def run(ctx) -> list[Row]:
    """One row per (bs, T); target: faster than the gather+fp32 oracle it replaces.
    (ctx, a kernels.bench.BenchContext, is not needed here.)"""
    rows = []
    for bs in BATCHES:
        for t in QUERY_LENS:
            args, kw = make_inputs(bs, t)
            nbytes = bs * KV_LEN * NKV * HEAD_DIM * 2 * 2 + 2 * args[0].numel() * 2
            k = bench_us(lambda a=args, k=kw: paged_attention(*a, **k, **LAUNCH))
            o = bench_us(lambda a=args, k=kw: paged_attention_ref(*a, **k))
            rows.append(Row("paged_attention", f"bs={bs} T={t} kv={KV_LEN}", "bfloat16", k, o,
                            nbytes, {}, ">=1x oracle", o.p50 >= k.p50))
    return (rows + rule_rows() + fused_merge_rows() + split_rows() + key_tile_rows()
            + tree_rows() + early_load_rows())


def _bs1(kv_len: int, width: int, **launch):
    """One bs-1 decode call at kv_len keys of a table of `width` with the launch switches
    `launch` (unsplit_max_width, fused_merge), and its bytes."""
    args, kw = make_inputs(1, 1, kv_len=kv_len, width=width)
    nbytes = kv_len * NKV * HEAD_DIM * 2 * 2 + 2 * args[0].numel() * 2
    return (lambda: paged_attention(*args, **kw, **launch)), nbytes


def rule_rows() -> list[Row]:
    """bs 1 decode: the rule on (unsplit, no merge) as `kernel`, off (split-K) as `oracle`."""
    rows = []
    for width in (704, 1024):
        for kv_len in (256, 512, 768, 1024):
            if kv_len > width:
                continue
            split = graph_us(_bs1(kv_len, width, unsplit_max_width=0)[0])
            call, nbytes = _bs1(kv_len, width, unsplit_max_width=width)
            unsplit = graph_us(call)
            rows.append(Row("paged_attention rule", f"bs=1 T=1 kv={kv_len} W={width} "
                            "unsplit vs split (graph us)", "bfloat16", unsplit, split, nbytes,
                            {}, "unsplit faster", unsplit.p50 < split.p50))
    return rows


def fused_merge_rows() -> list[Row]:
    """bs 1 decode: the fused merge as `kernel`, split-K + merge launch as `oracle`."""
    rows = []
    for width in (704, 32768):
        for kv_len in (256, 512, 1024, 2048, 4096):
            if kv_len > width:
                continue
            two = graph_us(_bs1(kv_len, width, fused_merge=False)[0])
            call, nbytes = _bs1(kv_len, width, fused_merge=True)
            fused = graph_us(call)
            splits = rules.num_splits(NKV, width, 32)
            rows.append(Row("paged_attention fused merge", f"bs=1 T=1 kv={kv_len} W={width} "
                            f"({splits} splits) fused vs two-launch (graph us)", "bfloat16",
                            fused, two, nbytes, {"splits": splits}, "fused faster",
                            fused.p50 < two.p50))
    return rows


def split_rows(width: int = 832) -> list[Row]:
    """bs 1 decode at the engine bench's table width: each forced split count as `kernel`
    against `num_splits`' choice as `oracle` (two launches, merge included): is the rule's
    floor of 4 key chunks per split the fastest at short contexts?"""
    rows = []
    chosen = rules.num_splits(NKV, width, 32)
    for kv_len in (512, 768):
        call, nbytes = _bs1(kv_len, width)
        with rules.forced():
            base = graph_us(call)
        for splits in (2, 4, 16, 32):
            with rules.forced(splits=splits):
                forced = graph_us(call)
            rows.append(Row("paged_attention splits", f"bs=1 T=1 kv={kv_len} W={width} "
                            f"{splits} vs {chosen} splits (graph us)", "bfloat16", forced,
                            base, nbytes, {"splits": splits, "chosen": chosen},
                            "forced faster", forced.p50 < base.p50))
    return rows


def key_tile_rows(width: int = 832, kv_len: int = 768) -> list[Row]:
    """bs 1 decode: each (keys per step, splits) as `kernel` against the default launch as
    `oracle` (two launches, merge included), with its output within 2e-2 of the default's."""
    call, nbytes = _bs1(kv_len, width)
    with rules.forced():
        base = graph_us(call)
        want = call()
    chosen = rules.num_splits(NKV, width, 32)
    rows = []
    for key_tile in (32, 64, 128):
        for splits in (4, 8, 16):
            with rules.forced(splits=splits, key_tile=key_tile):
                out = call()
                got = graph_us(call)
            ok = (out.float() - want.float()).abs().max().item() < 2e-2
            rows.append(Row("paged_attention key tile", f"bs=1 T=1 kv={kv_len} W={width} "
                            f"BLOCK_N={key_tile} {splits} splits vs 32 keys {chosen} splits "
                            "(graph us)", "bfloat16", got, base, nbytes,
                            {"key_tile": key_tile, "splits": splits, "chosen": chosen,
                             "same_output": ok},
                            "forced faster, same output", ok and got.p50 < base.p50))
    return rows


def tree_rows(width: int = 832, context: int = 512, nodes: int = 64) -> list[Row]:
    """bs 1 tree verify (T = nodes queries on one path-shaped ancestor mask, the worst case
    for the mask loads): each forced split count, two-launch and fused, as `kernel` against
    `num_splits`' choice with the merge launch as `oracle`; then taller query tiles (BLOCK_M
    128 and 256 of the T*G = 256 rows, so each KV head's keys are read by 2 or 1 programs per
    split instead of 16) at num_splits' choice and 2-16 splits, two-launch; and 64 or 128
    keys per loop step (KEY_TILE) at the tree rule's 16-row tiles, 4 and 8 splits."""
    args, kw = make_inputs(1, nodes, kv_len=context + nodes, width=width)
    mask = torch.ones(nodes, nodes, device=DEVICE, dtype=torch.bool).tril()[None]
    nbytes = (context + nodes) * NKV * HEAD_DIM * 2 * 2 + 2 * args[0].numel() * 2
    tiles = NH // NKV * nodes // rules.TREE_TILE[0]  # T*G rows in the tree rule's tiles
    chosen = rules.num_splits(NKV * tiles, width, 32)

    def call(fused: bool):
        return lambda: paged_attention(*args, **kw, tree_mask=mask, fused_merge=fused)

    with rules.forced():
        base = graph_us(call(False))
    rows = []
    for splits in (1, 2, 4, 8, 16):
        for fused in (False, True):
            if splits == 1 and fused:
                continue
            with rules.forced(splits=splits):
                got = graph_us(call(fused))
            how = "fused" if fused else "two-launch"
            rows.append(Row("paged_attention tree", f"bs=1 T={nodes} kv={context + nodes} "
                            f"W={width} {splits} splits {how} vs {chosen} (graph us)",
                            "bfloat16", got, base, nbytes,
                            {"splits": splits, "fused": fused, "chosen": chosen},
                            "forced faster", got.p50 < base.p50))
    want = paged_attention(*args, **kw, tree_mask=mask)  # the default tile and splits
    for block_m, warps in ((128, 4), (128, 8), (256, 8)):
        for splits in (None, 2, 4, 8, 16):  # None: num_splits' choice for the taller tiles
            with rules.forced(splits=splits, tall_tile=(block_m, warps)):
                out = call(False)()
                got = graph_us(call(False))
            rows.append(Row("paged_attention tree", f"bs=1 T={nodes} kv={context + nodes} "
                            f"W={width} BLOCK_M={block_m} warps={warps} "
                            f"{splits or 'auto'} splits vs {chosen} (graph us)", "bfloat16",
                            got, base, nbytes,
                            {"splits": splits, "block_m": block_m, "warps": warps,
                             "chosen": chosen},
                            "within 2e-2 of the default tile",
                            (out.float() - want.float()).abs().max().item() < 2e-2))
    for key_tile in (64, 128):
        for splits in (4, 8):
            with rules.forced(splits=splits, key_tile=key_tile):
                out = call(False)()
                got = graph_us(call(False))
            rows.append(Row("paged_attention tree", f"bs=1 T={nodes} kv={context + nodes} "
                            f"W={width} BLOCK_N={key_tile} {splits} splits vs {chosen} "
                            "(graph us)", "bfloat16", got, base, nbytes,
                            {"splits": splits, "key_tile": key_tile, "chosen": chosen},
                            "within 2e-2 of the default tile",
                            (out.float() - want.float()).abs().max().item() < 2e-2))
    return rows


def early_load_rows(width: int = 832) -> list[Row]:
    """EARLY_LOADS as `kernel` against the plain loop as `oracle`, default splits, CUDA-graph
    replays: bs-1 decode (768 keys), 16-token verify at bs 1 and 16 (528 keys), and a 64-node
    tree after 512 context keys; the target asks for bitwise the same output, faster."""
    rows = []
    for name, bs, t, kv_len in (("decode", 1, 1, 768), ("verify", 1, 16, 528),
                                ("verify", 16, 16, 528), ("tree", 1, 64, 576)):
        args, kw = make_inputs(bs, t, kv_len=kv_len, width=width)
        if name == "tree":
            kw["tree_mask"] = torch.ones(t, t, device=DEVICE, dtype=torch.bool).tril()[None]
        nbytes = bs * kv_len * NKV * HEAD_DIM * 2 * 2 + 2 * args[0].numel() * 2

        def call(a=args, k=kw):
            return paged_attention(*a, **k)

        with rules.forced(early_loads=False):
            base, want = graph_us(call), call()
        with rules.forced(early_loads=True):
            got, out = graph_us(call), call()
        same = torch.equal(out, want)
        rows.append(Row("paged_attention early loads", f"{name} bs={bs} T={t} kv={kv_len} "
                        f"W={width} early vs plain (graph us)", "bfloat16", got, base, nbytes,
                        {"same_output": same}, "faster, bitwise the same",
                        same and got.p50 < base.p50))
    return rows
