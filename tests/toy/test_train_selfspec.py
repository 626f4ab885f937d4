"""Self-spec fine-tuning: the dense training forward equals HF's, and the packed masks."""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from toy.train_selfspec import ISD_MASKS, dense_forward, pack_row


def test_dense_forward_matches_hf_causal():
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=40, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=8)).eval()
    ids = torch.randint(0, 40, (2, 11))
    pos = torch.arange(11).expand(2, -1)
    allowed = torch.ones(11, 11, dtype=torch.bool).tril().expand(2, -1, -1)
    with torch.no_grad():
        torch.testing.assert_close(dense_forward(model, ids, pos, allowed),
                                   model(ids).logits, rtol=1e-4, atol=1e-4)


def test_pack_row_blocks_see_only_the_clean_prefix():
    seq, prompt_len, mask, L = torch.arange(2, 42), 10, 1, 40
    ids, pos, labels, kind, allowed = pack_row(seq, prompt_len, L, mask, 2, 2,
                                               torch.Generator().manual_seed(0))
    assert (labels[: prompt_len - 1] == seq[1:prompt_len]).all()
    assert (labels[prompt_len - 1 : L] == -100).all()
    assert int((kind == 1).sum()) == 2 * ISD_MASKS
    for j in range(L, len(ids)):
        t = int(allowed[j, :L].sum())  # the block's anchor: it sees clean x_{<t} only
        assert allowed[j, :t].all() and pos[j] >= t
        block = int(allowed[j, L:].sum())
        if kind[j] == 1:  # ISD: strict causal, MASK at t+k predicts x_{t+k+1}
            assert ids[j] == mask and labels[j] == seq[pos[j] + 1]
            assert block == int(pos[j]) - t + 1
        elif pos[j] == t:  # LinearSpec seed keeps its token, no loss
            assert ids[j] == seq[t] and labels[j] == -100 and block in (4, 8)
        else:  # LinearSpec MASK predicts its own position, sees the whole block
            assert ids[j] == mask and labels[j] == seq[pos[j]] and block in (4, 8)
