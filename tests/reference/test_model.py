"""The paged Qwen3 forward equals transformers' Qwen3ForCausalLM (fp32), and loads checkpoints
in every supported layout."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from reference.config import ConfigError
from reference.kv_pool import KVPool, KVShape
from reference.loaders import load_target
from reference.model import ForwardBatch
from tests.reference.conftest import write_target
from workbench.numerics import assert_close


def _pool(target, rows: int, width: int = 64) -> KVPool:
    cfg = target.config
    shape = KVShape(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim)
    return KVPool(rows * width + 1, rows, width, shape, None, target.dtype, "cpu")


def _extend(target, pool, rows, done, new):
    """Each request b appends new[b] after done[b] committed tokens; returns logits per b."""
    bs, width = len(rows), max(len(n) for n in new)
    ids = torch.zeros(bs, width, dtype=torch.int64)
    for b, n in enumerate(new):
        ids[b, : len(n)] = torch.tensor(n)
    done_t, n_t = torch.tensor(done), torch.tensor([len(n) for n in new])
    positions = done_t[:, None] + torch.arange(width)
    rows_t = torch.tensor(rows)
    valid = torch.arange(width) < n_t[:, None]
    loc = pool.req_to_token[rows_t[:, None], positions.clamp(max=pool.context_len - 1)].long()
    batch = ForwardBatch(positions, torch.where(valid, loc, 0), rows_t, done_t + n_t)
    hidden, _ = target.forward(ids, batch, pool.req_to_token, pool.k, pool.v)
    logits = target.logits(hidden)
    return [logits[b, : len(n)] for b, n in enumerate(new)]


def test_prefill_and_ragged_decode_match_transformers(target, hf_model):
    g = torch.Generator().manual_seed(1)
    vocab = target.config.vocab_size
    seqs = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (7, 1, 12)]
    pool = _pool(target, 3)
    rows = [pool.admit(40) for _ in seqs]
    done = [0, 0, 0]
    steps = [seqs, [[5], [6, 7, 8], [9]], [[1], [2], [3]], [[4, 4], [1], [0, 2, 3, 4]]]
    with torch.no_grad():
        for new in steps:
            if new is not seqs:
                seqs = [s + n for s, n in zip(seqs, new)]
            got = _extend(target, pool, rows, done, new)
            for b, s in enumerate(seqs):
                want = hf_model(torch.tensor([s])).logits[0, done[b]:]
                assert_close(got[b], want, kind="reduction", name=f"logits of request {b}")
            done = [len(s) for s in seqs]


def test_tied_embeddings_and_sharded_index(tmp_path):
    hf = write_target(tmp_path / "tied", tie_word_embeddings=True)
    tied = load_target(tmp_path / "tied")
    assert tied.head is tied.embed
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    shard_dir = tmp_path / "sharded"
    shard_dir.mkdir()
    names = sorted(state)
    halves = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
    for file, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(shard_dir / file))
    index = {"weight_map": {k: f for f, keys in halves.items() for k in keys}}
    (shard_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    (shard_dir / "config.json").write_text((tmp_path / "tied" / "config.json").read_text())
    sharded = load_target(shard_dir)
    for a, b in zip(tied.layers, sharded.layers):
        assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))


@pytest.mark.parametrize("field,value,match", [
    ("num_key_value_heads", 3, "num_key_value_heads"),
    ("hidden_act", "gelu", "hidden_act"),
    ("hidden_size", None, "hidden_size"),
    ("head_dim", "8", "head_dim"),
])
def test_target_config_errors_name_the_field(tiny_dir, tmp_path, field, value, match):
    cfg = json.loads((tiny_dir / "config.json").read_text())
    cfg.pop(field) if value is None else cfg.update({field: value})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors").write_bytes((tiny_dir / "model.safetensors").read_bytes())
    with pytest.raises(ConfigError, match=match):
        load_target(tmp_path)


def test_missing_weight_is_named(tiny_dir, tmp_path):
    from safetensors.torch import load_file

    state = load_file(str(tiny_dir / "model.safetensors"))
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((tiny_dir / "config.json").read_text())
    with pytest.raises(ConfigError, match="model.layers.1.mlp.up_proj.weight"):
        load_target(tmp_path)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_deferred_residual_gives_the_same_bits_and_captures(dtype):
    """EngineOptions.deferred_residual moves each layer's residual add into the next layer:
    the same sums, so the final hidden and the residual stream captured after any layer
    (first, middle, last, repeated, out of order) are bitwise those of the plain loop."""
    from common.engine_options import EngineOptions
    from reference.loaders import random_target

    plain = random_target("tiny", dtype=dtype, options=EngineOptions(deferred_residual=False))
    deferred = plain.with_options(EngineOptions(deferred_residual=True))
    last = plain.config.num_layers - 1
    capture = (last, 0, 1, 0)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, plain.config.vocab_size, (2, 5), generator=g)
    out = []
    for target in (plain, deferred):
        pool = _pool(target, 2)
        rows = torch.tensor([pool.admit(20), pool.admit(20)])
        positions = torch.arange(5).repeat(2, 1)
        loc = pool.req_to_token[rows[:, None], positions].long()
        batch = ForwardBatch(positions, loc, rows, torch.full((2,), 5))
        with torch.no_grad():
            out.append(target.forward(ids, batch, pool.req_to_token, pool.k, pool.v,
                                      capture=capture, fast=False))
    (h0, aux0), (h1, aux1) = out
    assert torch.equal(h0, h1) and torch.equal(aux0, aux1)
    assert aux0.shape[-1] == len(capture) * plain.config.hidden_size


def test_pdl_is_for_decode_steps_on_the_kernel_path_only():
    """EngineOptions.pdl reaches the launches of one-token steps on the kernels' path; blocks
    (draft, verify) and the oracle path launch plainly."""
    from common.engine_options import EngineOptions
    from reference.model import uses_pdl

    on, off = EngineOptions(), EngineOptions(pdl=False)
    assert uses_pdl(on, torch.zeros(4, 1, 8), True)
    assert not uses_pdl(on, torch.zeros(1, 16, 8), True)
    assert not uses_pdl(on, torch.zeros(1, 1, 8), False)
    assert not uses_pdl(off, torch.zeros(1, 1, 8), True)
