"""`accept_bonus` against its oracle, the greedy rule itself, the golden case, bad input."""

import pytest
import torch
from hypothesis import given

from kernels import AcceptResult, accept_bonus, accept_bonus_ref
from tests.strategies import accept_cases
from workbench.numerics import assert_close

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = dict(accept_lens=torch.int32, commit_lens=torch.int32, bonus=torch.int64,
              out_tokens=torch.int64, new_seq_lens=torch.int64)


def _on_device(case: dict) -> dict:
    return {k: v.to(DEVICE) for k, v in case.items()}


@given(accept_cases())
def test_accept_bonus_matches_ref(case):
    case = _on_device(case)
    got = accept_bonus(**case)
    want = accept_bonus_ref(**case)
    assert isinstance(got, AcceptResult)
    for name in AcceptResult._fields:
        g = getattr(got, name)
        assert g.dtype == DTYPES[name] and g.is_contiguous(), name
        assert_close(g, getattr(want, name), name=name)


@given(accept_cases())
def test_accept_len_is_the_longest_matching_prefix(case):
    res = accept_bonus(**_on_device(case))
    cand, top1 = case["candidates"].tolist(), case["target_top1"].tolist()
    for b, (c, t) in enumerate(zip(cand, top1)):
        accept = 0
        while accept + 1 < len(c) and c[accept + 1] == t[accept]:
            accept += 1
        assert int(res.accept_lens[b]) == accept
        assert int(res.commit_lens[b]) == accept + 1
        assert int(res.bonus[b]) == t[accept]
        assert int(res.new_seq_lens[b]) == int(case["prefix_lens"][b]) + accept + 1
        assert res.out_tokens[b, : accept + 1].tolist() == c[1 : accept + 1] + [t[accept]]


def test_golden_case():
    cand = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]], device=DEVICE)
    top1 = torch.tensor([[90, 0, 0, 0], [21, 22, 23, 99]], device=DEVICE)
    res = accept_bonus(cand, top1, torch.tensor([5, 7], device=DEVICE))
    assert res.accept_lens.tolist() == [0, 3]
    assert res.bonus.tolist() == [90, 99]
    assert res.out_tokens.tolist() == [[90, 12, 13, 0], [21, 22, 23, 99]]
    assert res.commit_lens.tolist() == [1, 4]
    assert res.new_seq_lens.tolist() == [6, 11]


def test_block_of_one_takes_the_bonus_only():
    res = accept_bonus(*(torch.tensor(v, device=DEVICE) for v in ([[4], [5]], [[7], [8]], [0, 2])))
    assert res.accept_lens.tolist() == [0, 0] and res.bonus.tolist() == [7, 8]
    assert res.out_tokens.tolist() == [[7], [8]] and res.new_seq_lens.tolist() == [1, 3]


def _valid(**over) -> dict:
    args = dict(candidates=torch.zeros(3, 4, dtype=torch.int64),
                target_top1=torch.zeros(3, 4, dtype=torch.int64),
                prefix_lens=torch.zeros(3, dtype=torch.int64))
    args.update(over)
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


I64 = dict(dtype=torch.int64)
BAD = {
    "candidates float": ("candidates", dict(candidates=torch.zeros(3, 4))),
    "candidates rank 1": ("candidates", dict(candidates=torch.zeros(12, dtype=torch.int64))),
    "candidates strided": ("candidates", dict(candidates=torch.zeros(4, 3, **I64).t())),
    "candidates no columns": ("candidates", dict(candidates=torch.zeros(3, 0, dtype=torch.int64),
                                                 target_top1=torch.zeros(3, 0, dtype=torch.int64))),
    "target_top1 shape": ("target_top1", dict(target_top1=torch.zeros(3, 5, dtype=torch.int64))),
    "target_top1 int16": ("target_top1", dict(target_top1=torch.zeros(3, 4, dtype=torch.int16))),
    "target_top1 strided": ("target_top1", dict(target_top1=torch.zeros(4, 3, **I64).t())),
    "prefix_lens length": ("prefix_lens", dict(prefix_lens=torch.zeros(2, dtype=torch.int64))),
    "prefix_lens rank 2": ("prefix_lens", dict(prefix_lens=torch.zeros(3, 1, dtype=torch.int64))),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_raises_value_error_naming_the_argument(what):
    name, over = BAD[what]
    with pytest.raises(ValueError, match=name):
        accept_bonus(**_valid(**over))
    accept_bonus(**_valid())
