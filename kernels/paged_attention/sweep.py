"""Key-loop schedule sweep of `paged_attention` on the engine's launch shapes (CUDA only).

    python -m kernels.paged_attention.sweep [--shapes ...] [--stages 1,2] [--early 0,1]
        [--key-tiles 32,64] [--splits auto,1,2] [--unmasked 0,1] [--out PATH]

Qwen3-8B heads (nh 32, nkv 8, D 128, bf16), a table of width 832, keys at random pool slots:
bs-1 and bs-16 decode (768 keys), bs-1 and bs-16 16-token verify (528 keys) and a bs-1
64-node tree verify after 512 context keys (path-shaped ancestor mask). Each launch shape
runs every (LOOP_STAGES, EARLY_LOADS, KEY_TILE, forced split count, UNMASKED_BODY) of the
flags ("auto": the rule's) and, for the tree, the query tiles of TALL_TILE, as CUDA-graph
replays of the kernel and its merge, against the kernel's default launch; a row also checks
that its output is within 2e-2 of the default's. The question it answers: the key loop is
bound by its dependent gathered loads (table slot, then K, then V) and by its instruction
issue, so how much do Triton's software pipelining (loads issued `stages - 1` steps ahead),
the early-load loop, wider key steps, other split counts or unmasked key steps take off each
shape?
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch

from common.stamps import stamp
from kernels.paged_attention import kernel, rules
from kernels.paged_attention.bench import DEVICE, make_inputs
from kernels.timing import graph_us

SHAPES = (("decode", 1, 1, 768), ("decode", 16, 1, 768), ("verify", 1, 16, 528),
          ("verify", 16, 16, 528), ("tree", 1, 64, 576))
STAGES, EARLY, KEY_TILES = (1, 2, 3, 4), (False, True), (32, 64)
TREE_TILES = ((64, 4), (32, 4), (16, 4), (16, 2))  # TALL_TILE (BLOCK_M, warps)


def launch(name: str, bs: int, t: int, kv_len: int, width: int = 832):
    """The zero-argument call of one launch shape."""
    args, kw = make_inputs(bs, t, kv_len=kv_len, width=width)
    if name == "tree":
        kw["tree_mask"] = torch.ones(t, t, device=DEVICE, dtype=torch.bool).tril()[None]
    return lambda: kernel.paged_attention(*args, **kw)


def sweep(shapes=SHAPES, stages=STAGES, early=EARLY, key_tiles=KEY_TILES,
          splits=(None,), unmasked=(None,)) -> list[dict]:
    """One row per (shape, schedule): us p50 of the schedule and of the default launch
    (splits None: the split rule's count)."""
    rows = []
    for name, bs, t, kv_len in shapes:
        call = launch(name, bs, t, kv_len)
        with rules.forced():
            base, want = graph_us(call).p50, call().float()
        tiles = TREE_TILES if name == "tree" else (None,)
        for tile, ns, el, kt, sp, um in itertools.product(tiles, stages, early, key_tiles,
                                                          splits, unmasked):
            with rules.forced(tall_tile=tile, stages=ns, early_loads=el, key_tile=kt,
                              splits=sp, unmasked_body=um):
                err = (call().float() - want).abs().max().item()
                us = graph_us(call).p50
            row = dict(shape=f"{name} bs={bs} T={t} kv={kv_len}", tile=tile, stages=ns,
                       early=el, key_tile=kt, splits=sp, unmasked=um, us=us, default_us=base,
                       speedup=base / us, ok=err < 2e-2)
            rows.append(row)
            print(f"{row['shape']:<28} tile={str(tile):<8} stages={ns} early={_s(el)} "
                  f"keys={_s(kt):<4} splits={_s(sp):<4} unmasked={_s(um):<4} "
                  f"{us:7.2f} us (default {base:6.2f}) "
                  f"x{base / us:5.2f} {'ok' if row['ok'] else 'DIFFERS'}", flush=True)
    return rows


def _s(value) -> str:
    """A swept value as printed: auto for the rule's (None)."""
    return "auto" if value is None else str(int(value))


def _ints(text: str) -> tuple:
    return tuple(None if v == "auto" else int(v) for v in text.split(","))


def _flags(text: str) -> tuple:
    return tuple(None if v is None else bool(v) for v in _ints(text))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="", help="e.g. 'verify bs=16,decode bs=16' (names as "
                   "printed, matched by prefix; default: all)")
    p.add_argument("--stages", default=",".join(map(str, STAGES)))
    p.add_argument("--early", default="0,1")
    p.add_argument("--key-tiles", default=",".join(map(str, KEY_TILES)))
    p.add_argument("--splits", default="auto", help="e.g. auto,1,2,4")
    p.add_argument("--unmasked", default="auto", help="UNMASKED_BODY: e.g. 0,1")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    wanted = [w.strip() for w in a.shapes.split(",") if w.strip()]
    shapes = [s for s in SHAPES if not wanted
              or any(f"{s[0]} bs={s[1]} T={s[2]}".startswith(w) for w in wanted)]
    rows = sweep(shapes, _ints(a.stages), _flags(a.early), _ints(a.key_tiles), _ints(a.splits),
                 _flags(a.unmasked))
    for shape in dict.fromkeys(r["shape"] for r in rows):
        best = min((r for r in rows if r["shape"] == shape and r["ok"]), key=lambda r: r["us"])
        print(f"best {shape}: {best['us']:.2f} us (default {best['default_us']:.2f}): "
              f"tile={best['tile']} stages={best['stages']} early={best['early']} "
              f"keys={best['key_tile']} splits={best['splits'] or 'auto'} "
              f"unmasked={best['unmasked']}")
    if a.out:
        Path(a.out).write_text(json.dumps({**stamp(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
