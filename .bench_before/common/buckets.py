"""Round-up arithmetic and the engine's CUDA-graph size buckets.

The engine pads a batch of n requests to the smallest entry of BATCH_BUCKETS >= n (multiples
of 64 past the table), so a few captured graphs cover every batch; DSpark's ragged verify pads
its total token count to a token grid (`token_buckets`). The simulator prices the same padding,
so both read these functions. Functions take Python ints or numpy integer arrays.
"""

from __future__ import annotations

import numpy as np

BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def cdiv(n, d):
    """ceil(n / d) for integers n >= 0, d > 0 (ints or integer arrays)."""
    return -(-n // d)


def round_up(n, multiple: int):
    """The smallest multiple of `multiple` >= n (n >= 0; ints or integer arrays)."""
    return cdiv(n, multiple) * multiple


def bucket(n, buckets=BATCH_BUCKETS, beyond: int | None = 64):
    """The smallest entry of `buckets` (sorted ascending) >= n.

    Past the last entry n is rounded up to a multiple of `beyond`, or returned as it is when
    `beyond` is None. An int n gives an int, an array n (any shape) an int64 array.
    """
    b = np.asarray(buckets, dtype=np.int64)
    arr = np.asarray(n, dtype=np.int64)
    i = np.searchsorted(b, arr, side="left")
    past = arr if beyond is None else round_up(arr, beyond)
    out = np.where(i < b.size, b[np.minimum(i, b.size - 1)], past)
    return int(out) if out.ndim == 0 else out


def token_buckets(block_size: int, max_tokens: int = 1 << 14) -> np.ndarray:
    """CUDA-graph token sizes of a ragged verify, ascending (int64).

    capture_bs x B (SGLang compact mode) for every batch bucket, plus multiples of 8 up to
    256 and of 64 beyond, up to `max_tokens` (the optional extra buckets; our choice [I]).
    """
    grid = {b * block_size for b in BATCH_BUCKETS}
    grid |= set(range(8, 257, 8)) | set(range(320, max_tokens + 1, 64))
    return np.array(sorted(g for g in grid if g <= max_tokens), dtype=np.int64)
