"""Counting the aten ops a call runs: the kernels a GPU would launch for it, on any device."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class OpCount(TorchDispatchMode):
    """Counts aten calls that write memory: views (outputs aliasing an input without
    writing it) are left out, in-place ops counted. `with OpCount() as c: fn()`, then c.ops.
    Run the call eagerly: a replayed CUDA graph shows up as its input copies only."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not any(r.alias_info is not None and not r.alias_info.is_write
                   for r in func._schema.returns):
            self.ops += 1
        return func(*args, **(kwargs or {}))
