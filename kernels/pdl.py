"""Programmatic dependent launch (PDL, Hopper and later): one kernel starting early.

A kernel launched with PDL may be scheduled before the kernel ahead of it in the stream has
finished: its programs get resident while that kernel drains, so the launch latency and
the tail of one overlap instead of adding. Every program of such a kernel first runs
`pdl_enter`: `gdc_wait` blocks until the kernel before it has completed and flushed its
memory (so nothing is read or written early), then `gdc_launch_dependents` lets the next
PDL launch start. The wait is transitive (the kernel before could only complete after its
own wait), so a chain of PDL launches keeps stream order. A launch without PDL ignores
both; kernels other than ours (cuBLAS, Inductor's) launch as usual.

The switch is `EngineOptions.pdl`; `launch_options` gives the launch keyword for it.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl


@triton.jit
def pdl_enter(PDL: tl.constexpr):
    """The first statement of a kernel that may be PDL-launched (PDL: it is)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@functools.cache
def _hopper_or_later(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] >= 9


def use_pdl(pdl: bool, tensor: torch.Tensor) -> bool:
    """Whether a launch on tensor's device takes PDL: asked for, and a CUDA device of
    compute capability >= 9 (elsewhere, the CPU interpreter included, a plain launch). The
    capability is looked up once per device, not at every launch."""
    return bool(pdl) and tensor.is_cuda and _hopper_or_later(tensor.device)


def launch_options(pdl: bool) -> dict[str, bool]:
    """The launch keywords of a kernel whose PDL constexpr is `pdl` (from `use_pdl`)."""
    return {"launch_pdl": True} if pdl else {}
