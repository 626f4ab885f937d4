"""How a kernel's outputs are compared with its oracle's: exact for ids, counts and slots;
the tolerance table of common/numerics.py for floats (fp32: its reduction row; fp16/bf16:
the 2x rule against the same-dtype oracle). Each op's bench.py `check` returns one row
(op, shape, dtype, max_abs_err, mismatches, ok) built with these."""

from __future__ import annotations

import torch

from common.numerics import tolerance, two_x_bound

# Triton's CPU interpreter truncates fp32 -> bf16 (no round to nearest): allow one ulp there.
INTERPRETER_BF16_RTOL = 2.0**-7


def merge(op: str, shape: str, dtype: str, parts: list[tuple[float, int, bool]]) -> tuple:
    """One table row for all outputs of one case."""
    return (op, shape, dtype, max(p[0] for p in parts), sum(p[1] for p in parts),
            all(p[2] for p in parts))


def exact(got: torch.Tensor, want: torch.Tensor) -> tuple[float, int, bool]:
    bad = int((got != want).sum()) if got.shape == want.shape else max(got.numel(), 1)
    err = float((got - want).abs().max()) if got.numel() and got.shape == want.shape else 0.0
    return err, bad, bad == 0


def close(got, want_fp32, want_low) -> tuple[float, int, bool]:
    """Agreement of a float output with its fp32 oracle (and the same-dtype oracle)."""
    if got.numel() == 0:
        return 0.0, 0, True
    diff = (got.double() - want_fp32.double()).abs()
    if got.dtype == torch.float32:
        rtol, atol = tolerance(got.dtype, "reduction")
        bound = atol + rtol * want_fp32.double().abs()
    elif got.dtype == torch.bfloat16 and got.device.type == "cpu":
        bound = INTERPRETER_BF16_RTOL * want_fp32.double().abs() + 1e-6
    else:
        low_err = float((want_low.double() - want_fp32.double()).abs().max())
        bound = torch.full_like(diff, two_x_bound(low_err, got.dtype))
    bad = int((diff > bound).sum())
    return float(diff.max()), bad, bad == 0
