"""Triton kernels of the DFlash hot path, each next to its pure-PyTorch oracle.

Ops (signatures in docs/architecture.md, "Public contracts"): `prepare_block`,
`accept_bonus`, `kv_materialize`, plus the engine's `paged_attention`, `qk_norm_rope_write`
and `gemv` (decode rows times a weight), and their oracles `*_ref`. The oracles need only torch.
Triton is imported on the first call of a kernel, never by `import kernels`, so that a CPU
process can still set TRITON_INTERPRET=1 before it is imported (`python -m kernels.check`).

`kernels.<op>` is the launcher, which hides the subpackage of the same name: import an op's
modules with `from kernels.<op> import kernel, ref, bench` (not `import kernels.<op>.x as y`).
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil

import torch


@functools.cache
def _triton_imports() -> bool:
    try:
        importlib.import_module("triton")
    except ImportError:
        return False
    return True


def triton_available(tensor: torch.Tensor) -> bool:
    """True when the Triton kernels can run on `tensor`'s device.

    That is: the tensor is on CUDA, or TRITON_INTERPRET=1 is set (CPU interpreter); and
    triton imports. Callers use it to choose between a kernel and its `*_ref` oracle.
    """
    if not (tensor.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        return False
    return _triton_imports()


@functools.cache
def _kernel(op: str):
    return getattr(importlib.import_module(f"kernels.{op}.kernel"), op)


def _lazy(op: str):
    """A forwarder to `kernels.<op>.kernel.<op>` that imports the module on first call."""
    ref = globals()[f"{op}_ref"]

    @functools.wraps(ref)
    def call(*args, **kwargs):
        return _kernel(op)(*args, **kwargs)

    call.__name__ = call.__qualname__ = op
    call.__module__ = __name__
    call.__doc__ = f"Triton version of `{op}_ref` (same signature and results).\n\n{ref.__doc__}"
    return call


# Every subpackage is an op: kernels/<op>/ holds kernel.py, ref.py (with `<op>_ref`, and
# `__all__` for anything else it exports) and bench.py (`check`, `CHECKS`, `BENCH_CHECK`,
# `run`), so a new kernel is its folder and its test. The launcher is bound after the
# oracle's import, which sets `kernels.<op>` to the subpackage.
OPS = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg))
__all__ = ["OPS", "triton_available"]
for _op in OPS:
    _ref = importlib.import_module(f"kernels.{_op}.ref")
    for _name in getattr(_ref, "__all__", [f"{_op}_ref"]):
        globals()[_name] = getattr(_ref, _name)
        __all__.append(_name)
    globals()[_op] = _lazy(_op)
    __all__.append(_op)
