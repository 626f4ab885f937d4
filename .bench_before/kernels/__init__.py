"""Triton kernels of the DFlash hot path, each next to its pure-PyTorch oracle.

Ops (signatures in shared/design/ARCHITECTURE.md, "Public contracts"): `prepare_block`,
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

import torch

from kernels.accept_bonus.ref import AcceptResult, accept_bonus_ref
from kernels.gemv.ref import gemv_ref
from kernels.kv_materialize.ref import kv_materialize_ref
from kernels.paged_attention.ref import paged_attention_ref
from kernels.prepare_block.ref import prepare_block_ref
from kernels.qk_norm_rope_write.ref import qk_norm_rope_write_ref

__all__ = [
    "AcceptResult",
    "accept_bonus",
    "accept_bonus_ref",
    "gemv",
    "gemv_ref",
    "kv_materialize",
    "kv_materialize_ref",
    "paged_attention",
    "paged_attention_ref",
    "prepare_block",
    "prepare_block_ref",
    "qk_norm_rope_write",
    "qk_norm_rope_write_ref",
    "triton_available",
]


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


# Bound after the oracle imports above, which set `kernels.<op>` to the subpackage.
prepare_block = _lazy("prepare_block")
accept_bonus = _lazy("accept_bonus")
kv_materialize = _lazy("kv_materialize")
paged_attention = _lazy("paged_attention")
qk_norm_rope_write = _lazy("qk_norm_rope_write")
gemv = _lazy("gemv")
