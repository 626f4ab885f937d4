"""Every toy drafter drafts in the engine what its training forward predicts.

For each variant of toy/variants.py (and the EAGLE chain of toy/eagle.py)
`generate` decodes a small ragged batch on the tiny random target (fp32, CPU) and every
round's candidates [anchor, d_1 .. d_{B-1}] (bs, B), as the verifier reads them, must lie in
[0, V) and equal the argmax of the dense training forward (toy/dense_blocks.py,
`dense_eagle_hidden`) at that anchor, teacher-forced on the committed context followed by
[anchor, d_1 .. d_{B-2}]: the engine's drafting and the training forward are one function.

Two doubles make the CPU run catch what the GPU run hits:
- `SharedPoolGraphs` models the CUDA graphs' shared memory pool (reference/cuda_graphs.py):
  a graph's outputs are overwritten by the next graph run (on the GPU the verify graph,
  captured first, reuses the memory of a later-captured draft graph's output);
- the verifier accepts a random number of drafts, so that an untrained drafter still sees
  multi-token commits (KV injection of several columns, chains over accepted drafts).
With TRITON_INTERPRET=1 the same runs also go through the Triton kernels (prepare_block,
paged_attention, kv_materialize, accept_bonus); torch.compile and real graphs need a GPU.
"""

from __future__ import annotations

import pytest
import torch

import kernels
from reference import engine, ops, proposers
from reference.cuda_graphs import GraphCache, flatten, unflatten
from reference.generate import generate
from reference.loaders import load_target
from tests.reference.conftest import write_target
from tests.toy.test_dense_blocks import _model
from tests.toy.test_draft_model import BLOCK, MASK_ID
from toy.dense_blocks import dense_block_logits
from toy.draft_model import target_features
from toy.eagle import dense_eagle_hidden
from toy.variants import context_features, load_variant


class SharedPoolGraphs(GraphCache):
    """The CPU pass-through GraphCache plus the shared pool's hazard: every `run` copies
    its inputs (a graph's static buffers), then overwrites the outputs of the previous run
    with garbage (ints -12345, floats NaN) before computing its own."""

    def __init__(self, device="cpu"):
        super().__init__(device, enabled=False)
        self.live: list[torch.Tensor] = []

    def run(self, key, fn, *inputs):
        leaves, spec = flatten(inputs)
        leaves = [t.clone() for t in leaves]
        inputs = leaves if spec is None else unflatten(spec, iter(leaves))
        for t in self.live:
            t.fill_(float("nan") if t.is_floating_point() else -12345)
        out = fn(*inputs)
        self.live = flatten(out if isinstance(out, tuple) else (out,))[0]
        return out


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine_drafts_target")
    write_target(path)
    return load_target(path)


def _decode(target, proposer, prompts, monkeypatch, seed):
    """generate() with the doubles; returns its output and, per round, (req_rows (bs,),
    prefix_lens (bs,), candidates (bs, B)) as the verifier read them."""
    vocab = target.config.vocab_size
    rounds, seen = [], []
    propose = proposer.propose

    def recording_propose(rnd):
        rounds.append((rnd.req_rows.clone(), rnd.prefix_lens.clone()))
        return propose(rnd)

    g = torch.Generator().manual_seed(seed)

    def forced_verify(candidates, logits, prefix_lens, verify_lens=None):
        bad = candidates[(candidates < 0) | (candidates >= vocab)]
        assert bad.numel() == 0, f"draft ids out of [0, {vocab}): {bad.tolist()}"
        seen.append(candidates.clone())
        accept = torch.randint(0, candidates.shape[1], (candidates.shape[0],), generator=g)
        agree = torch.arange(candidates.shape[1])[None, :] < accept[:, None]
        top1 = torch.where(agree, candidates.roll(-1, dims=1), logits.argmax(dim=-1))
        return ops.accept_bonus(candidates, top1, prefix_lens)

    monkeypatch.setattr(proposer, "propose", recording_propose)
    monkeypatch.setattr(proposers, "verify_greedy", forced_verify)
    monkeypatch.setattr(engine, "GraphCache", SharedPoolGraphs)
    target.runtime = None
    try:
        out = generate(target, prompts, proposer=proposer, max_new_tokens=10)
    finally:
        target.runtime = None
    return out, [(*r, c) for r, c in zip(rounds, seen)]


def _dense_drafts(model, target, variant, seq: list[int], anchor: int) -> torch.Tensor:
    """Dense training logits (B-1, V) of the block at `anchor` of sequence seq."""
    ids = torch.tensor([seq])
    lens = torch.tensor([len(seq)])
    captured = None
    if variant != "no_features":
        captured = target_features(target, ids, lens, model.config.target_layer_ids)
    feats = context_features(variant, target, ids, captured)
    drafter, anchors = model.drafter(target), torch.tensor([[anchor]])
    with torch.no_grad():
        if variant == "eagle":
            return target.logits(dense_eagle_hidden(drafter, model.in_proj(target), target,
                                                    ids, feats, anchors, BLOCK))[0, 0]
        return dense_block_logits(drafter, target, feats, ids, lens, anchors, BLOCK, MASK_ID,
                                  variant)[0, 0]


@pytest.mark.parametrize("triton", [False, True], ids=["oracles", "triton"])
@pytest.mark.parametrize("variant", ["ar", "eagle", "dflash", "no_features", "fusion"])
def test_engine_drafts_are_the_training_forward_argmax(target, variant, triton, tmp_path,
                                                       monkeypatch):
    if triton:
        if not kernels.triton_available(torch.zeros(1)):
            pytest.skip("needs TRITON_INTERPRET=1 or CUDA")
        monkeypatch.setattr(ops, "_use_triton", lambda t: True)
    model = _model(target, variant)
    model.save(tmp_path / variant, dtype=torch.float32)
    proposer = load_variant(tmp_path / variant, target)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(2, MASK_ID, (n,), generator=g).tolist() for n in (9, 5, 12)]
    out, rounds = _decode(target, proposer, prompts, monkeypatch, seed=len(variant))
    rows = {}  # request row -> request index, from the first round (all requests live)
    for b, row in enumerate(rounds[0][0].tolist()[: len(prompts)]):
        rows[row] = b
    assert max(c for per in out.accept_lengths for c in per) > 1  # multi-token commits ran
    checked = 0
    for req_rows, prefix_lens, candidates in rounds:
        for b, row in enumerate(req_rows.tolist()):
            if row not in rows:
                continue  # a padding row
            full = prompts[rows[row]] + out.tokens[rows[row]]
            p, cand = int(prefix_lens[b]), candidates[b].tolist()
            assert cand[0] == full[p]
            logits = _dense_drafts(model, target, variant, full[:p] + cand, p)
            picked = logits.gather(-1, candidates[b, 1:, None])[:, 0]
            gap = logits.max(dim=-1).values - picked
            assert (gap <= 1e-4).all(), (f"{variant} round at prefix {p}: engine drafts "
                                         f"{cand[1:]}, training argmax "
                                         f"{logits.argmax(-1).tolist()}")
            checked += 1
    assert checked >= len(prompts)
