"""The public API of docs/architecture.md imports as written, and works end to end."""

from __future__ import annotations

from pathlib import Path

import torch

ZOO = Path(__file__).parents[1] / "experiments" / "zoo"


def test_reference_api_decodes_the_zoo_pair():
    from reference import GenerateOutput, generate, load_dflash, load_target

    target = load_target(ZOO / "target", device="cpu", dtype=torch.float32)
    prompt = [[5, 6, 7, 8, 9, 10]]
    plain = generate(target, prompt, max_new_tokens=12)
    out = generate(target, prompt, proposer=load_dflash(ZOO / "dflash-b16", target),
                   max_new_tokens=12)
    assert isinstance(out, GenerateOutput) and out.tokens == plain.tokens
    assert sum(out.accept_lengths[0]) >= len(out.tokens[0]) - 1


def test_kernel_and_simulator_api_imports():
    from kernels import (  # noqa: F401
        accept_bonus,
        accept_bonus_ref,
        kv_materialize,
        kv_materialize_ref,
        prepare_block,
        prepare_block_ref,
    )
    from simulator import run

    assert callable(run) and callable(prepare_block_ref)
