"""Counting the aten ops a call runs: the kernels a GPU would launch for it, on any device."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCount(TorchDispatchMode):
    """Counts aten calls that write memory: views (outputs aliasing an input without
    writing it) are left out, in-place ops counted. `with OpCount() as c: fn()`, then c.ops.
    Run the call eagerly: a replayed CUDA graph shows up as its input copies only. Inside
    the block torch.compile'd code runs eagerly too (compiler stance "force_eager"): tracing
    it under this mode would add recompiles to its caches, and a cache at its size limit
    leaves every later new shape uncompiled, slowing whatever is timed after the count."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self._stance = None

    def __enter__(self):
        self._stance = torch.compiler.set_stance("force_eager")
        self._stance.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._stance.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not any(r.alias_info is not None and not r.alias_info.is_write
                   for r in func._schema.returns):
            self.ops += 1
        return func(*args, **(kwargs or {}))
