"""Host-side argument checks shared by the kernel launchers.

Every check raises ValueError naming the offending argument, so a bad call fails on the host
before any launch instead of writing wrong values or reading out of bounds on the device.
None of them reads tensor values (that would be a device-to-host sync).
"""

from __future__ import annotations

import torch

from kernels import triton_available

INT_DTYPES = (torch.int32, torch.int64)
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensor(
    name: str,
    t: object,
    *,
    ndim: int,
    dtypes: tuple[torch.dtype, ...],
    device: torch.device | None = None,
    inner_stride_one: bool = False,
) -> torch.Tensor:
    """Check that `t` is a tensor of rank `ndim`, one of `dtypes`, on `device`.

    With inner_stride_one, the last dimension must also be contiguous (stride 1), as the
    kernels index it directly; the other strides are passed to the kernel.
    """
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have rank {ndim}, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ValueError(f"{name} must have dtype in ({allowed}), got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device} like the other inputs")
    if inner_stride_one and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension, strides {t.stride()}")
    return t


def check_len(name: str, t: torch.Tensor, size: int, what: str) -> None:
    """Check that dimension 0 of `t` has `size` entries (`what` names where it comes from)."""
    if t.shape[0] != size:
        raise ValueError(f"{name} has {t.shape[0]} entries, expected {size} ({what})")


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """Check that `value` is a Python int (not bool) and at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_runnable(name: str, t: torch.Tensor) -> None:
    """Triton needs CUDA tensors, or CPU tensors with TRITON_INTERPRET=1."""
    if not triton_available(t):
        raise ValueError(
            f"{name} is on {t.device}: Triton kernels need a CUDA tensor, or TRITON_INTERPRET=1 "
            "set before triton is imported (use the *_ref oracle otherwise)"
        )


def num_warps_for(block: int) -> int:
    """SGLang's warp table for one-row-per-program kernels: 1 up to 16 lanes, then 2, 4, 8."""
    if block <= 16:
        return 1
    if block <= 32:
        return 2
    return 4 if block <= 64 else 8
