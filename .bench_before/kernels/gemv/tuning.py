"""`GemvTuning`: how the GEMV launcher picks its config (tune.py), importable without triton.

The engine builds one from its EngineOptions and passes it down to every `gemv` call; it is
part of tune.py's cache key, so calls under different tunings never share a cached choice.
"""

from __future__ import annotations

from typing import NamedTuple


class GemvTuning(NamedTuple):
    """tune: time candidates on the first CUDA call of a shape (False: default config).
    graph: time them as CUDA-graph replays streaming W past L2 (False: do_bench).
    cublas_fallback: call cuBLAS where it timed faster than every candidate."""

    tune: bool = True
    graph: bool = True
    cublas_fallback: bool = True


DEFAULT_TUNING = GemvTuning()
