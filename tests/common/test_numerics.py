"""The tolerance table and the 2x rule's bound (common/numerics.py), read by name."""

import pytest

from common.numerics import dtype_name, tolerance, two_x_bound


def test_table_rows_by_name():
    assert tolerance("float64") == (1e-7, 1e-7)
    assert tolerance("float32") == (1.3e-6, 1e-5)
    assert tolerance("float32", "reduction") == (1e-5, 1e-4)
    assert tolerance("float16") == (1e-3, 1e-3)
    assert tolerance("bfloat16") == (1.6e-2, 1e-2)
    with pytest.raises(ValueError, match="2x rule"):
        tolerance("float16", "reduction")


def test_dtype_names_drop_the_torch_prefix():
    assert dtype_name("torch.bfloat16") == "bfloat16"
    assert dtype_name("float32") == "float32"


def test_two_x_bound_is_twice_the_low_error_plus_eps():
    assert two_x_bound(0.01, "bfloat16") == pytest.approx(0.021)
    assert two_x_bound(0.01, "torch.float16") == pytest.approx(0.0201)
    assert two_x_bound(0.5, "float32") == 1.0
