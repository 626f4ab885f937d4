"""Launch rules of `paged_attention` (kernel.py): tiles, early loads, unmasked key steps, splits.

Each rule maps a launch's shapes (never its data) to a constexpr or grid choice, so a CUDA
graph replays what it captured. The module-level switches override a rule for tests,
benches and sweeps (`forced`); None leaves the rule in charge. kernel.py reads them at each
launch, through this module, so `forced` acts on every launch inside its block. The H200
numbers behind each rule come from kernels/paged_attention/bench.py and sweep.py.
"""

from __future__ import annotations

import contextlib

import triton

FORCE_SPLITS: int | None = None  # tests set it to run the split path on tiny shapes
TALL_TILE: tuple[int, int] | None = None
"""(BLOCK_M, num_warps) of a launch with more than 64 query rows per KV head (a tree verify,
a prefill), for sweeps: fewer, taller tiles read each key fewer times. None: the rule
`query_tile`. Read at launch, so a CUDA graph keeps the value it was captured with."""
TREE_TILE = (16, 4)
"""(BLOCK_M, num_warps) of a tree verify's launch (`query_tile`)."""
KEY_TILE: int | None = None
"""BLOCK_N, the keys a program takes per loop step (a power of two >= 16). None: the rule
`key_tile`."""
WIDE_KEYS_PROGRAMS = 128  # (b, h, query tile) programs from which early-load loops take 64 keys
EARLY_LOADS: bool | None = None
"""Issue each key step's V load with its K load, and load the next step's slots from the
table during this step, so a step waits on one global load instead of three in a row
(table, K, then V after the scores). The same arithmetic in the same order (bitwise the same
output). None: the shape rule `uses_early_loads`; True / False: every launch."""
EARLY_MAX_ROWS = 64  # query rows per KV head up to which the rule issues the loads early
UNMASKED_BODY: bool | None = None
"""Run the key steps that every row of a tile sees in full (below each row's position, before
a tree's nodes, no window) without the masks: no range predicates on their loads, no causal,
window or tree mask on their scores; only the last steps (and windowed launches) take them.
The same values in the same order (bitwise the same output). None: the rule
`unmasked_body`; True / False: every launch."""
LOOP_STAGES: int | None = None
"""Triton's software-pipeline depth for the launch (num_stages: the key loop's loads issued
that many steps ahead into shared memory). None: `loop_stages`' 2."""


def query_tile(rows: int, tree: bool) -> tuple[int, int]:
    """(BLOCK_M, num_warps) of a launch of `rows` query rows per KV head (T * nh / nkv):
    TALL_TILE past 64 rows when set; a tree verify's TREE_TILE, 16-row tiles: its programs'
    key loops are latency-bound, so four times the programs of 64-row tiles (each key read
    by more of them, from L2) finish sooner; else one tile of up to 64 rows (a decode step's
    4 rows in a 16-row tile). On an H200 (sweep.py: bs 1, a 64-node tree after 512 keys,
    CUDA-graph replays with the merge) 16-row tiles took 21.2 us against 26.6 for 64-row
    ones, and 32-row tiles sat between."""
    if TALL_TILE is not None and rows > 64:
        return TALL_TILE
    if tree:
        return TREE_TILE
    return min(64, max(16, triton.next_power_of_2(rows))), 4


def key_tile(block_d: int, early: bool, programs: int) -> int:
    """BLOCK_N: KEY_TILE when set; 64 at head dims <= 64; else 64 for an early-load launch of
    at least WIDE_KEYS_PROGRAMS (b, h, query tile) programs, which the split rule gives at
    most 2 splits, so each program walks many keys (half the dependent steps); else 32. On
    an H200 (sweep.py, Qwen3-8B heads, 768 / 528 keys) 64 keys a step took a bs-16 decode
    from 27.6 to 21.0 us and a bs-16 16-token verify from 29.9 to 27.7, while the bs-1
    launches (8 programs before splitting) ran 0.4-1.3 us slower with them."""
    if KEY_TILE:
        return KEY_TILE
    if block_d <= 64:
        return 64
    return 64 if early and programs >= WIDE_KEYS_PROGRAMS else 32


def unmasked_body(tree: bool) -> bool:
    """Whether a launch runs its fully visible key steps unmasked: UNMASKED_BODY when set,
    else for tree verifies only. On an H200 (sweep.py, CUDA-graph replays with the merge) it
    took a bs-1 64-node tree from 21.1 to 20.2 us, where every masked step gathers the
    ancestor mask, and made the decode and 16-token verify launches 0.2-1.2 us slower."""
    return UNMASKED_BODY if UNMASKED_BODY is not None else tree


def loop_stages() -> int:
    """num_stages of the launch: LOOP_STAGES when set, else 2 (sweep.py on an H200: deeper
    pipelines gained nothing once the early loads were in)."""
    return LOOP_STAGES or 2


def uses_early_loads(rows: int) -> bool:
    """Whether a launch of `rows` query rows per KV head (T * nh / nkv) takes the early
    loads: EARLY_LOADS when set, else rows <= EARLY_MAX_ROWS, one 64-row query tile (a
    decode step, a verify block of up to 16 tokens at 4 query heads per KV head). On an H200
    (kernels/paged_attention/bench.py early_load_rows, Qwen3-8B heads, CUDA-graph replays)
    they took 0.3 us off a bs-1 decode, 1.2 us off a bs-1 16-token verify and 4.6 us off a
    bs-16 one, and added 2.1 us to a 64-node tree verify (256 rows), so taller launches (trees,
    prefill) keep the plain loop. A shape rule: safe under CUDA graphs."""
    return EARLY_LOADS if EARLY_LOADS is not None else rows <= EARLY_MAX_ROWS


@contextlib.contextmanager
def forced(*, splits: int | None = None, tall_tile: tuple[int, int] | None = None,
           key_tile: int | None = None, early_loads: bool | None = None,
           stages: int | None = None, unmasked_body: bool | None = None):
    """FORCE_SPLITS, TALL_TILE, KEY_TILE, EARLY_LOADS, LOOP_STAGES and UNMASKED_BODY set for a
    block (tests, benches, sweeps), then restored. None leaves each to its rule."""
    global FORCE_SPLITS, TALL_TILE, KEY_TILE, EARLY_LOADS, LOOP_STAGES, UNMASKED_BODY
    saved = FORCE_SPLITS, TALL_TILE, KEY_TILE, EARLY_LOADS, LOOP_STAGES, UNMASKED_BODY
    (FORCE_SPLITS, TALL_TILE, KEY_TILE, EARLY_LOADS, LOOP_STAGES,
     UNMASKED_BODY) = splits, tall_tile, key_tile, early_loads, stages, unmasked_body
    try:
        yield
    finally:
        FORCE_SPLITS, TALL_TILE, KEY_TILE, EARLY_LOADS, LOOP_STAGES, UNMASKED_BODY = saved


def num_splits(programs: int, width: int, block_n: int, unsplit_max_width: int = 0) -> int:
    """Key-range splits: FORCE_SPLITS when set; else enough that a small batch still fills
    the GPU: ~2 programs per SM (132 on an H200), at least 4 key chunks per split; a power of
    two, 1 for large batches. A table width W <= unsplit_max_width runs unsplit (the
    short-context rule; 0 turns it off)."""
    if FORCE_SPLITS:
        return FORCE_SPLITS
    if width <= unsplit_max_width:
        return 1
    want = max(1, 264 // max(programs, 1))
    most = max(1, width // (4 * block_n))
    return min(triton.next_power_of_2(want), triton.next_power_of_2(most), 64)
