"""The DFlash drafter: injected-KV draft forward equals a dense recomputation; loader errors."""

from __future__ import annotations

import json

import pytest
import torch

from kernels import prepare_block_ref
from reference.config import ConfigError
from reference.cuda_graphs import GraphCache
from reference.kv_pool import KVPool, KVShape
from reference.loaders import load_target
from reference.methods.dflash import load_dflash
from reference.methods.dflash_drafter import draft_forward
from reference.model import ForwardBatch
from reference.proposers import Accepted, Round, StepOutput, Verified
from tests.reference.conftest import TINY, drafter_config, drafter_weights, write_drafter
from workbench.numerics import assert_close


def _norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, pos, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
    ang = torch.cat([pos[:, None] * inv] * 2, dim=-1)[:, None, :]  # (n, 1, D)
    rot = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * ang.cos() + rot * ang.sin()


def dense_draft_logits(target, drafter, ctx_aux, block_ids, prefix):
    """Drafter recomputed densely for one request: context K/V projected inline."""
    cfg = drafter.config.model
    nh, nkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    ctx = _norm(ctx_aux @ drafter.fc.t(), drafter.hidden_norm)
    x = target.embed[block_ids]
    n, b = ctx.shape[0], block_ids.shape[0]
    pos_c, pos_b = torch.arange(n).float(), torch.arange(prefix, prefix + b).float()
    key_pos = torch.cat([pos_c, pos_b])
    for i, w in enumerate(drafter.layers):
        q, k, v = (_norm(x, w.input_norm) @ w.wqkv.t()).split([nh * d, nkv * d, nkv * d], -1)
        kc, vc = (ctx @ w.wqkv[nh * d :].t()).split([nkv * d, nkv * d], -1)
        q = _rope(_norm(q.view(b, nh, d), w.q_norm), pos_b, cfg.rope_theta)
        k = _rope(_norm(k.view(b, nkv, d), w.k_norm), pos_b, cfg.rope_theta)
        kc = _rope(_norm(kc.view(n, nkv, d), w.k_norm), pos_c, cfg.rope_theta)
        keys = torch.cat([kc, k]).repeat_interleave(nh // nkv, dim=1)  # (n+b, nh, D)
        vals = torch.cat([vc.view(n, nkv, d), v.view(b, nkv, d)]).repeat_interleave(nh // nkv, 1)
        scores = torch.einsum("qhd,khd->hqk", q, keys) / d**0.5
        if cfg.window(i) is not None:
            diff = pos_b[:, None] - key_pos[None, :]
            scores = scores.masked_fill(~((diff >= 0) & (diff < cfg.window(i))), float("-inf"))
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vals).reshape(b, nh * d)
        x = x + attn @ w.wo.t()
        gate, up = (_norm(x, w.post_norm) @ w.w_gate_up.t()).chunk(2, -1)
        x = x + (torch.nn.functional.silu(gate) * up) @ w.w_down.t()
    return _norm(x[1:], drafter.norm) @ target.head.t()


@pytest.mark.parametrize("extra", [{}, {"layer_types": ["sliding_attention", "full_attention"],
                                        "sliding_window": 3}])
def test_injected_draft_equals_dense_recomputation(tiny_dir, tmp_path, extra):
    target = load_target(tiny_dir)
    write_drafter(tmp_path, drafter_config(block_size=5, **extra))
    proposer = load_dflash(tmp_path, target)
    drafter, block = proposer.drafter, proposer.block_size
    cfg = target.config
    pool = KVPool(400, 3, 64, KVShape(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim),
                  proposer.draft_kv, torch.float32, "cpu")
    g = torch.Generator().manual_seed(0)
    lens = torch.tensor([5, 9, 3])
    rows = torch.tensor([pool.admit(int(n) + 3 * block) for n in lens])
    ids = torch.randint(0, cfg.vocab_size, (3, 9), generator=g)
    positions = torch.arange(9).expand(3, 9)
    loc = torch.where(positions < lens[:, None], pool.req_to_token[rows, :9].long(), 0)
    prompt = ForwardBatch(positions, loc, rows, lens)
    with torch.no_grad():
        _, aux = target.forward(ids, prompt, pool.req_to_token, pool.k, pool.v,
                                capture=proposer.target_layer_ids)
        proposer.bind(target, pool, GraphCache("cpu"))
        proposer.prefill(ids, prompt, aux)
        ctx = [aux[b, : lens[b]] for b in range(3)]
        prefix = lens.clone()
        for commit in (torch.tensor([2, 5, 1], dtype=torch.int32), None):
            anchor = torch.randint(0, cfg.vocab_size, (3,), generator=g)
            block_ids, pos, cache_loc = prepare_block_ref(
                anchor, prefix, rows, pool.req_to_token, block_size=block,
                mask_token_id=proposer.mask_token_id)
            batch = ForwardBatch(pos, cache_loc, rows, prefix + block)
            got = draft_forward(drafter, target, block_ids, batch, pool.req_to_token,
                                pool.draft_k, pool.draft_v)
            for b in range(3):
                want = dense_draft_logits(target, drafter, ctx[b], block_ids[b], int(prefix[b]))
                assert_close(got[b], want, kind="reduction", name=f"draft logits {b}")
            if commit is None:
                break
            rnd = Round(anchor, prefix, rows, block_ids, pos, cache_loc, torch.ones_like(rows))
            proposal = proposer.propose(rnd)
            candidates = proposal.candidates
            assert torch.equal(candidates[:, 1:], got.argmax(-1))
            _, vaux = target.forward(candidates, batch, pool.req_to_token, pool.k, pool.v,
                                     capture=proposer.target_layer_ids)
            out = StepOutput(commit, candidates, candidates[:, 0], prefix + commit)
            proposer.commit(rnd, proposal, Verified(None, vaux), Accepted(out))
            ctx = [torch.cat([ctx[b], vaux[b, : commit[b]]]) for b in range(3)]
            prefix = prefix + commit


@pytest.mark.parametrize("change,match", [
    (lambda c: c.update(hidden_size=16), "hidden_size"),
    (lambda c: c["dflash_config"].update(mask_token_id=TINY["vocab_size"]), "mask_token_id"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[0, 3]), "target_layer_ids"),
    (lambda c: c.pop("dflash_config"), "dflash_config"),
    (lambda c: c.update(num_target_layers=7), "num_target_layers"),
    (lambda c: c.update(layer_types=["sliding_attention"] * 2), "sliding_window"),
])
def test_drafter_config_errors_name_the_field(target, tmp_path, change, match):
    cfg = drafter_config()
    weights = drafter_weights(cfg)
    change(cfg)
    write_drafter(tmp_path, cfg, weights)
    with pytest.raises(ConfigError, match=match):
        load_dflash(tmp_path, target)


def test_drafter_weight_errors_name_the_tensor(target, tmp_path):
    cfg = drafter_config()
    weights = drafter_weights(cfg)
    weights["fc.weight"] = weights["fc.weight"][:, :-1].contiguous()
    del weights["layers.1.self_attn.k_norm.weight"]
    write_drafter(tmp_path, cfg, weights)
    with pytest.raises(ConfigError, match="k_norm|fc.weight"):
        load_dflash(tmp_path, target)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "block_size": 0}))
    with pytest.raises(ConfigError, match="block_size"):
        load_dflash(tmp_path, target)
