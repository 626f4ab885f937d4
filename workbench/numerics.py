"""Torch-side assert helpers that explain their failures, on the one tolerance table.

The table (per dtype: elementwise and reduction (rtol, atol), and the 2x rule for 16-bit
reductions) lives in common/numerics.py. On failure the helpers report the mismatch count
and the first indices with both values; on success the returned Report still carries the max
and mean error.

torch is imported inside the functions so that `workbench` imports without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.numerics import tolerance, two_x_bound


@dataclass(frozen=True)
class Report:
    """Agreement statistics between an output and its oracle."""

    numel: int
    mismatches: int
    max_abs: float
    mean_abs: float
    first_bad: list[tuple[tuple[int, ...], float, float]]

    def __str__(self) -> str:
        head = (
            f"{self.mismatches}/{self.numel} mismatched, max|d|={self.max_abs:.3g}, "
            f"mean|d|={self.mean_abs:.3g}"
        )
        rows = [f"  at {idx}: got {a!r}, expected {b!r}" for idx, a, b in self.first_bad]
        return "\n".join([head, *rows])


def compare(actual, expected, *, rtol: float, atol: float, max_report: int = 5) -> Report:
    """Elementwise |a - e| <= atol + rtol * |e| (NaN positions must agree)."""
    import torch

    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.shape != e.shape:
        raise AssertionError(f"shape mismatch: got {tuple(a.shape)}, expected {tuple(e.shape)}")
    diff = (a - e).abs()
    nan_ok = torch.isnan(a) & torch.isnan(e)
    bad = ~((diff <= atol + rtol * e.abs()) | nan_ok)
    finite = diff[~nan_ok & torch.isfinite(diff)]
    idx = bad.nonzero().tolist()[:max_report]
    a0, e0 = actual.detach().cpu(), expected.detach().cpu()
    first = [(tuple(i), a0[tuple(i)].item(), e0[tuple(i)].item()) for i in idx]
    return Report(
        numel=a.numel(),
        mismatches=int(bad.sum()),
        max_abs=float(finite.max()) if finite.numel() else 0.0,
        mean_abs=float(finite.mean()) if finite.numel() else 0.0,
        first_bad=first,
    )


def assert_close(actual, expected, *, dtype=None, kind: str = "elementwise", rtol=None, atol=None,
                 name: str = "output") -> Report:
    """Assert `actual` matches `expected` within the table's tolerance for `dtype`.

    Integer and bool tensors must match exactly. Returns the report (print it to see the
    max and mean error on success too).
    """
    dtype = dtype if dtype is not None else actual.dtype
    if not (actual.dtype.is_floating_point or actual.dtype.is_complex):
        rtol, atol = 0.0, 0.0
    elif rtol is None or atol is None:
        rtol, atol = tolerance(dtype, kind)
    rep = compare(actual, expected, rtol=rtol, atol=atol)
    if rep.mismatches:
        raise AssertionError(f"{name} differs from its oracle (rtol={rtol}, atol={atol}): {rep}")
    return rep


def assert_two_x(actual, oracle_fp32, oracle_same_dtype, *, name: str = "output") -> Report:
    """The 2x rule: max|actual - fp32| <= 2 * max|same_dtype - fp32| + eps(dtype)."""
    import torch

    ref = oracle_fp32.detach().to("cpu", torch.float64)
    low_err = (oracle_same_dtype.detach().to("cpu", torch.float64) - ref).abs().max().item()
    bound = two_x_bound(low_err, actual.dtype)
    rep = compare(actual, oracle_fp32, rtol=0.0, atol=bound)
    if rep.mismatches:
        raise AssertionError(
            f"{name} breaks the 2x rule (bound {bound:.3g} = 2 x {low_err:.3g} + eps): {rep}"
        )
    return rep


def assert_adjacent(actual, expected, *, scale=None, name: str = "output") -> Report:
    """actual and expected, of one float dtype, are equal or neighbours: |a - e| <= one ulp
    of max(|a|, |e|, scale) in that dtype. This is what two computations that differ only in
    fp32 summation order before a single rounding to a 16-bit dtype may disagree by.

    scale: an optional floor broadcastable to the tensors (e.g. `row_rms`). Sums
    whose terms cancel leave values far below their terms' size, where fp32 order moves the
    value by many of its own ulps while staying far below an ulp of the row it belongs to.
    """
    import torch

    if actual.dtype != expected.dtype or not actual.dtype.is_floating_point:
        raise ValueError(f"{name}: two tensors of one float dtype expected, got "
                         f"{actual.dtype} and {expected.dtype}")
    info = torch.finfo(actual.dtype)
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    top = torch.maximum(a.abs(), e.abs()).clamp(min=info.tiny)
    if scale is not None:
        top = torch.maximum(top, torch.as_tensor(scale).detach().to("cpu", torch.float64))
    ulp = info.eps * torch.exp2(torch.floor(torch.log2(top)))
    rep = compare(a / ulp, e / ulp, rtol=0.0, atol=1.0)
    if rep.mismatches:
        raise AssertionError(f"{name}: more than one ulp apart (differences in ulps): {rep}")
    return rep


def row_rms(x):
    """(..., 1) fp32 rms over the last dim of x (..., D): a head's or row's scale, the floor
    `assert_adjacent` measures cancelled values against."""
    return x.float().pow(2).mean(-1, keepdim=True).sqrt()
