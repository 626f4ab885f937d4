"""The toy world's corpus split, tokenizer and target training (micro size, CPU)."""

import json

import pytest

from toy.corpus import SPLITS, read_texts, source_files, split_of
from toy.tokenizer import EOT, MASK, encode_corpus, train_tokenizer


def test_split_is_deterministic_and_disjoint():
    files = {s: {p.as_posix() for p in source_files(s)} for s in SPLITS}
    assert all(files[s] for s in SPLITS)
    assert not (files["train"] & files["test"]) and not (files["train"] & files["validation"])
    assert split_of("json/decoder.py") == split_of("json/decoder.py")
    with pytest.raises(ValueError, match="split"):
        source_files("dev")


def test_tokenizer_reserves_eot_and_mask_and_round_trips():
    texts = read_texts("validation", max_files=5)
    tok = train_tokenizer(texts, vocab_size=600)
    assert tok.token_to_id(EOT) == 0 and tok.token_to_id(MASK) == 1
    sample = "def f(x):\n    return x + 1\n"
    assert tok.decode(tok.encode(sample).ids) == sample
    stream = encode_corpus(tok, texts[:2])
    assert stream.count(0) == 2 and 1 not in stream


def test_micro_target_loss_falls_and_loads_in_transformers(micro):
    from transformers import Qwen3ForCausalLM

    out, records = micro  # the recipe's target stage is train_target("micro", ...)
    m = records["target"]["metrics"]
    assert m["train_loss_last"] < m["train_loss_first"] - 0.5
    assert json.loads((out / "target" / "metrics.json").read_text())["val_loss"] == m["val_loss"]
    model = Qwen3ForCausalLM.from_pretrained(out / "target")
    assert model.config.hidden_size == m["config"]["hidden"]
    assert (out / "target" / "tokenizer.json").exists()


def test_dropout_acts_in_training_only_and_keeps_the_checkpoint_plain():
    """--dropout regularizes every residual branch while training; eval is deterministic
    and the saved architecture is unchanged (no dropout modules, same state-dict keys)."""
    import torch
    from transformers import Qwen3ForCausalLM

    from toy.train_target import SIZES, add_dropout, evaluate, qwen3_config

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(qwen3_config(SIZES["micro"], 64, 0))
    keys = set(model.state_dict())
    add_dropout(model, 0.5)
    x = torch.randint(0, 64, (2, 12))
    model.train()
    assert not torch.equal(model(input_ids=x).logits, model(input_ids=x).logits)
    stream = torch.randint(0, 64, (200,))
    assert evaluate(model, stream, 12, 4, 2) == evaluate(model.train(), stream, 12, 4, 2)
    assert not model.training  # the validation checks of training run without dropout
    assert torch.equal(model(input_ids=x).logits, model(input_ids=x).logits)
    assert set(model.state_dict()) == keys
    plain = Qwen3ForCausalLM(qwen3_config(SIZES["micro"], 64, 0))
    plain.load_state_dict(model.state_dict())
    assert torch.allclose(plain.eval()(input_ids=x).logits, model(input_ids=x).logits)
