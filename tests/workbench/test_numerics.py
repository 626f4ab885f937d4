"""The tolerance table and the assert helpers of workbench.numerics."""

import pytest
import torch

from common.numerics import tolerance
from workbench.numerics import assert_adjacent, assert_close, assert_two_x, compare


def test_table_rows():
    assert tolerance(torch.float32) == (1.3e-6, 1e-5)
    assert tolerance(torch.float32, "reduction") == (1e-5, 1e-4)
    assert tolerance(torch.bfloat16) == (1.6e-2, 1e-2)
    with pytest.raises(ValueError, match="2x rule"):
        tolerance(torch.bfloat16, "reduction")


def test_integers_must_match_exactly_and_report_names_the_index():
    a = torch.tensor([[1, 2], [3, 4]])
    b = torch.tensor([[1, 2], [3, 5]])
    assert_close(a, a.clone())
    with pytest.raises(AssertionError, match=r"(?s)1/4 mismatched.*at \(1, 1\): got 4, expected 5"):
        assert_close(a, b, name="ids")


def test_float_tolerance_and_report_statistics():
    e = torch.linspace(-1, 1, 101)
    rep = assert_close(e + 5e-6, e)
    assert rep.mismatches == 0 and rep.max_abs == pytest.approx(5e-6, rel=1e-2)
    with pytest.raises(AssertionError, match="differs from its oracle"):
        assert_close(e + 1e-3, e)
    nan = torch.tensor([float("nan"), 1.0])
    assert compare(nan, nan.clone(), rtol=0, atol=0).mismatches == 0


def test_two_x_rule_bound_comes_from_the_same_dtype_oracle():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=g)
    exact = x @ x.t()
    low = (x.bfloat16() @ x.bfloat16().t())
    assert_two_x(low, exact, low)
    with pytest.raises(AssertionError, match="2x rule"):
        assert_two_x(low + 1.0, exact, low)


@pytest.mark.parametrize("dtype,bits", [(torch.bfloat16, 7), (torch.float16, 10)])
def test_adjacent_allows_one_ulp_and_no_more(dtype, bits):
    """Neighbours are built by stepping the bit pattern (one ulp, whatever the binade);
    two steps away inside a binade is two ulps and must fail. The ulp of 1.5 is 2^-bits."""
    x = torch.tensor([1.5, -3.25, 0.0078125, 1000.0]).to(dtype)
    up = (x.view(torch.int16) + 1).view(dtype)
    assert_adjacent(x, up)
    assert_adjacent(x, x.clone())
    assert float(up[0]) - 1.5 == 2.0**-bits
    with pytest.raises(AssertionError, match="more than one ulp"):
        assert_adjacent(x, (x.view(torch.int16) + 2).view(dtype))
    with pytest.raises(ValueError, match="one float dtype"):
        assert_adjacent(x, x.float())


def test_adjacent_measures_small_values_at_the_given_scale():
    """A sum whose terms cancel: 2^-20 against 2^-19 differ by 2^-20, half an ulp at a
    scale of 2^-12 (bf16's ulp there: 2^-19), two at 2^-14 (ulp 2^-21), and 2^7 ulps of
    the values themselves (ulp of 2^-19: 2^-26)."""
    a = torch.tensor([2.0**-20, 1.0]).bfloat16()
    e = torch.tensor([2.0**-19, 1.0]).bfloat16()
    with pytest.raises(AssertionError, match="more than one ulp"):
        assert_adjacent(a, e)
    assert_adjacent(a, e, scale=torch.tensor([2.0**-12, 0.0]))
    with pytest.raises(AssertionError, match="more than one ulp"):
        assert_adjacent(a, e, scale=torch.tensor([2.0**-14, 0.0]))
