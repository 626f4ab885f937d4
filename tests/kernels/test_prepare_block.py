"""`prepare_block` against its oracle, the table-width edge, and bad input."""

import pytest
import torch
from hypothesis import given

from kernels import prepare_block, prepare_block_ref
from tests.strategies import prepare_block_cases
from workbench.numerics import assert_close

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _on_device(case: dict) -> dict:
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in case.items()}


@given(prepare_block_cases())
def test_prepare_block_matches_ref(case):
    case = _on_device(case)
    got = prepare_block(**case)
    want = prepare_block_ref(**case)
    for name, g, w in zip(("block_ids", "positions", "cache_loc"), got, want):
        assert g.dtype == torch.int64 and g.is_contiguous()
        assert_close(g, w, name=name)


@given(prepare_block_cases())
def test_positions_beyond_the_table_map_to_slot_zero(case):
    case = _on_device(case)
    _, positions, cache_loc = prepare_block(**case)
    width = case["req_to_token"].shape[1]
    beyond = positions >= width
    assert torch.equal(positions, case["prefix_lens"].long()[:, None]
                       + torch.arange(case["block_size"], device=DEVICE))
    assert bool((cache_loc[beyond] == 0).all())
    assert bool((cache_loc[~beyond] > 0).all())  # the tables hold slots >= 1


def test_empty_batch_returns_empty_blocks():
    table = torch.ones(2, 8, dtype=torch.int32, device=DEVICE)
    empty = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    outs = prepare_block(empty, empty, empty, table, block_size=5, mask_token_id=3)
    assert [tuple(o.shape) for o in outs] == [(0, 5)] * 3


def _valid(**over) -> dict:
    args = dict(
        verified_id=torch.tensor([5, 6], device=DEVICE),
        prefix_lens=torch.tensor([0, 3], device=DEVICE),
        req_pool_indices=torch.tensor([1, 0], device=DEVICE),
        req_to_token=torch.arange(16, dtype=torch.int32, device=DEVICE).view(2, 8),
        block_size=4,
        mask_token_id=9,
    )
    args.update(over)
    return args


BAD = {
    "verified_id float": ("verified_id", dict(verified_id=torch.tensor([5.0, 6.0]))),
    "verified_id rank 2": ("verified_id", dict(verified_id=torch.tensor([[5, 6]]))),
    "prefix_lens length": ("prefix_lens", dict(prefix_lens=torch.tensor([0, 1, 2]))),
    "req_pool_indices length": ("req_pool_indices", dict(req_pool_indices=torch.tensor([1]))),
    "req_pool_indices bool": ("req_pool_indices", dict(req_pool_indices=torch.tensor([1, 0]) > 0)),
    "req_to_token rank 1": ("req_to_token", dict(req_to_token=torch.zeros(8, dtype=torch.int32))),
    "req_to_token float": ("req_to_token", dict(req_to_token=torch.zeros(2, 8))),
    "req_to_token strided": (
        "req_to_token", dict(req_to_token=torch.zeros(8, 2, dtype=torch.int32).t())),
    "block_size 0": ("block_size", dict(block_size=0)),
    "block_size float": ("block_size", dict(block_size=4.0)),
    "mask_token_id str": ("mask_token_id", dict(mask_token_id="9")),
    "not a tensor": ("prefix_lens", dict(prefix_lens=[0, 3])),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_raises_value_error_naming_the_argument(what):
    name, over = BAD[what]
    over = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in over.items()}
    with pytest.raises(ValueError, match=name):
        prepare_block(**_valid(**over))
    prepare_block(**_valid())


@pytest.mark.gpu
def test_inputs_on_another_device_are_refused():
    with pytest.raises(ValueError, match="verified_id"):
        prepare_block(**_valid(verified_id=torch.tensor([5, 6])))
