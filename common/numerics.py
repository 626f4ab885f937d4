"""The tolerance table per dtype and the 2x rule (docs/architecture.md, "Numerics and tolerances").

| dtype    | elementwise (rtol, atol) | reductions / matmul / attention | discrete |
| float64  | 1e-7, 1e-7               | same                            | exact    |
| float32  | 1.3e-6, 1e-5             | 1e-5, 1e-4                      | exact    |
| bfloat16 | 1.6e-2, 1e-2             | 2x rule                         | exact    |
| float16  | 1e-3, 1e-3               | 2x rule                         | exact    |

The 2x rule (flash-attention's): for 16-bit outputs of a reduction, the error against an fp32
oracle may be at most twice the error of the same oracle run in the low-precision dtype, plus
a small epsilon, so the tolerance comes from the data. Dtypes are named by string ("float32");
a torch or numpy dtype is accepted and named by its `str` without the "torch." prefix.
The torch-side assert helpers live in workbench/numerics.py, the kernel check's in
kernels/check.py; both read this table.
"""

from __future__ import annotations

from typing import Any

ELEMENTWISE = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "bfloat16": (1.6e-2, 1e-2),
    "float16": (1e-3, 1e-3),
}
REDUCTION = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-5, 1e-4),
}
TWO_X_EPS = {"bfloat16": 1e-3, "float16": 1e-4}


def dtype_name(dtype: Any) -> str:
    """"float32" for torch.float32, numpy.float32 or the string itself."""
    return str(dtype).removeprefix("torch.")


def tolerance(dtype: Any, kind: str = "elementwise") -> tuple[float, float]:
    """(rtol, atol) for `dtype`; kind is 'elementwise' or 'reduction' (fp32/fp64 only)."""
    name = dtype_name(dtype)
    table = REDUCTION if kind == "reduction" else ELEMENTWISE
    if name not in table:
        raise ValueError(f"no {kind} tolerance for dtype {name}; use the 2x rule for 16-bit")
    return table[name]


def two_x_bound(low_err: float, dtype: Any) -> float:
    """The 2x rule's absolute bound: 2 * low_err + eps(dtype).

    Args:
        low_err: max |oracle in `dtype` - oracle in fp32| over the output.
        dtype: the output's dtype (eps is 0 outside bfloat16/float16).
    """
    return 2.0 * low_err + TWO_X_EPS.get(dtype_name(dtype), 0.0)
