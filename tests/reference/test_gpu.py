"""The CUDA path (CUDA graphs, Triton kernels, padded batch buckets) decodes losslessly."""

from __future__ import annotations

import pytest
import torch

from common.survival import geometric_survival
from reference import ops
from reference.generate import generate
from reference.loaders import load_target
from reference.methods.dflash import load_dflash
from reference.methods.oracle import OracleProposer

pytestmark = pytest.mark.gpu


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_engine_is_lossless(tiny_dir, drafter_dir, dtype):
    cpu = load_target(tiny_dir)
    gpu = load_target(tiny_dir, device="cuda", dtype=dtype)
    assert ops._use_triton(gpu.embed)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 48, (n,), generator=g).tolist() for n in (5, 9, 3, 12, 1)]
    plain = generate(gpu, prompts, max_new_tokens=40, stop_token_ids=(7,))
    if dtype == torch.float32:
        assert plain.tokens == generate(cpu, prompts, max_new_tokens=40,
                                        stop_token_ids=(7,)).tokens
    for block in (1, 4, 16):
        dflash = load_dflash(drafter_dir, gpu, block_size=block)
        spec = generate(gpu, prompts, proposer=dflash, max_new_tokens=40, stop_token_ids=(7,))
        assert spec.tokens == plain.tokens
        curve = geometric_survival(1 + 0.6 * (block - 1), block) if block > 1 else []
        oracle = OracleProposer(plain.tokens, block, curve, shadow=dflash)
        spec = generate(gpu, prompts, proposer=oracle, max_new_tokens=40, stop_token_ids=(7,))
        assert spec.tokens == plain.tokens
    gpu.runtime.pool.check()
    assert gpu.runtime.pool.free_slots == gpu.runtime.pool.num_slots - 1


def test_cuda_sampling_runs_with_graphs(tiny_dir, drafter_dir):
    gpu = load_target(tiny_dir, device="cuda")
    dflash = load_dflash(drafter_dir, gpu)
    out = generate(gpu, [[1, 2, 3]] * 6, proposer=dflash, max_new_tokens=20, temperature=0.8,
                   top_k=10, top_p=0.9, seed=3)
    assert all(len(t) == 20 for t in out.tokens)


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.parametrize("budget", [16, 48])
def test_cuda_tree_decoding_equals_greedy_in_sync_and_overlap(budget):
    """The zoo pair (real acceptance, so paths are deep and slots are permuted every round)
    on CUDA graphs: tree decoding equals plain greedy, in sync and overlap mode. Catches a
    round whose graph capture repeats a non-idempotent step (the slot permutation)."""
    from pathlib import Path

    from toy.eval_sets import held_out_prompts

    zoo = Path(__file__).resolve().parents[2] / "experiments" / "zoo"
    gpu = load_target(zoo / "target", device="cuda", dtype=torch.float32)
    prompts = held_out_prompts(zoo / "tokenizer" / "tokenizer.json", "test", 24)
    plain = generate(gpu, prompts, max_new_tokens=48)
    for lookahead in (False, True):
        tree = load_dflash(zoo / "dflash-b16", gpu, tree_budget=budget)
        out = generate(gpu, prompts, proposer=tree, max_new_tokens=48, lookahead=lookahead)
        assert out.tokens == plain.tokens
        assert sum(map(sum, out.accept_lengths)) / sum(map(len, out.accept_lengths)) > 2.0
    gpu.runtime.pool.check()


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_fused_commit_keeps_tokens_and_rounds(tiny_dir, drafter_dir, dtype):
    """EngineOptions.fused_commit on CUDA graphs: acceptance and the draft-KV injection
    captured inside the verify graph (the injection's own graph nested in it) give the
    tokens and commit lengths of the unfused rounds, in sync and overlap mode."""
    from common.engine_options import EngineOptions

    gpu = load_target(tiny_dir, device="cuda", dtype=dtype)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 48, (n,), generator=g).tolist() for n in (5, 9, 3, 12, 1)]
    want = generate(gpu, prompts, proposer=load_dflash(drafter_dir, gpu), max_new_tokens=40)
    fused = gpu.with_options(EngineOptions(fused_commit=True))
    for lookahead in (False, True):
        got = generate(fused, prompts, proposer=load_dflash(drafter_dir, fused),
                       max_new_tokens=40, lookahead=lookahead)
        assert got.tokens == want.tokens and got.accept_lengths == want.accept_lengths
    assert any(k[0][0] == "verify_commit" for k in fused.runtime.graphs._graphs)
    fused.runtime.pool.check()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graphed_decode_step_keeps_tokens(tiny_dir, dtype):
    """EngineOptions.graphed_decode on CUDA: the whole greedy step (prepare_block, forward,
    argmax, outputs) is captured as one graph and decodes the eager step's tokens over
    padded buckets and a stop token, in sync and overlap mode."""
    from common.engine_options import EngineOptions

    eager = load_target(tiny_dir, device="cuda", dtype=dtype,
                        options=EngineOptions(graphed_decode=False))
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 48, (n,), generator=g).tolist() for n in (5, 9, 3, 12, 1)]
    kw = dict(max_new_tokens=40, stop_token_ids=(7,))
    want = generate(eager, prompts, **kw)
    graphed = eager.with_options(EngineOptions())
    for lookahead in (False, True):
        got = generate(graphed, prompts, lookahead=lookahead, **kw)
        assert got.tokens == want.tokens
    steps = [e for k, e in graphed.runtime.graphs._graphs.items() if k[0] == ("decode", "step")]
    assert steps and all(e[0] is not None for e in steps)  # captured, not run eagerly
    graphed.runtime.pool.check()


def test_cuda_second_proposer_over_one_drafter_captures_nothing():
    """The zoo pair, fused commit: a fresh proposer over the first one's drafter replays the
    first one's graphs (draft and verify + commit), with the same tokens and rounds."""
    from pathlib import Path

    from common.engine_options import EngineOptions
    from reference.methods.dflash_drafter import DFlashProposer
    from toy.eval_sets import held_out_prompts

    zoo = Path(__file__).resolve().parents[2] / "experiments" / "zoo"
    gpu = load_target(zoo / "target", device="cuda", dtype=torch.float32,
                      options=EngineOptions(fused_commit=True))
    prompts = held_out_prompts(zoo / "tokenizer" / "tokenizer.json", "test", 8)
    first = load_dflash(zoo / "dflash-b16", gpu)
    want = generate(gpu, prompts, proposer=first, max_new_tokens=48)
    captured = set(gpu.runtime.graphs._graphs)
    assert any(k[0][0] == "verify_commit" for k in captured)
    again = generate(gpu, prompts, proposer=DFlashProposer(first.drafter, gpu),
                     max_new_tokens=48)
    assert set(gpu.runtime.graphs._graphs) == captured
    assert again.tokens == want.tokens and again.accept_lengths == want.accept_lengths
