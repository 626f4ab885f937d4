"""The trainable DFlash drafter and its training forward, on the inference engine's own math.

`TrainableDrafter` holds z-lab-named fp32 parameters; `drafter(target)` assembles them into
the inference `reference.methods.dflash_drafter.Drafter` (the same loader code,
differentiably, cast to the target's dtype), so training runs the inference code itself:

- the target features come from `Target.forward`'s capture (the residual stream after each
  layer id, as the engine captures it; HF `hidden_states[id + 1]`);
- the context K/V is `kernels.kv_materialize_ref` of `hidden_norm(fc(features))` at absolute
  positions (k_proj/v_proj/k_norm/RoPE, no input_layernorm), written to a per-batch pool;
- every block is one request of `reference.methods.dflash_drafter.draft_forward` whose
  table row holds the context strictly before its anchor and then its own slots
  (`block_layout`): bidirectional in the block, blocks isolated, no padding requests.
  Attention takes the differentiable oracle whenever gradients are needed (reference/ops.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors.torch import save_file

from kernels.kv_materialize.ref import kv_materialize_ref
from reference.config import DFlashConfig, ModelConfig
from reference.loaders import random_dflash_state_dict
from reference.methods.dflash_drafter import (
    Drafter,
    context_hidden,
    draft_forward,
    draft_stack,
    drafter_from_state_dict,
)
from reference.model import ForwardBatch, Target, rms_norm
from toy.eagle import eagle_block_logits
from toy.objective import block_inputs


def drafter_config_dict(target: ModelConfig, *, num_layers: int, block_size: int,
                        mask_token_id: int, target_layer_ids: list[int],
                        variant: str = "dflash") -> dict:
    """A z-lab drafter config.json: the target's layer shapes, `num_layers` layers; an
    ablation variant (toy/variants.py) is named in dflash_config.variant."""
    extra = {} if variant == "dflash" else {"variant": variant}
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": target.hidden_size, "num_hidden_layers": num_layers,
        "num_attention_heads": target.num_heads, "num_key_value_heads": target.num_kv_heads,
        "head_dim": target.head_dim, "intermediate_size": target.intermediate_size,
        "vocab_size": target.vocab_size, "rms_norm_eps": target.rms_norm_eps,
        "rope_theta": target.rope_theta, "max_position_embeddings": target.max_position,
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
        "block_size": block_size, "num_target_layers": target.num_layers,
        "dflash_config": {"mask_token_id": mask_token_id,
                          "target_layer_ids": list(target_layer_ids), **extra},
    }


class TrainableDrafter(torch.nn.Module):
    """fp32 master parameters of a DFlash drafter under their z-lab names."""

    def __init__(self, raw_config: dict, target: Target, seed: int = 0,
                 state: dict[str, torch.Tensor] | None = None):
        super().__init__()
        self.raw_config = raw_config
        self.config = DFlashConfig.from_dict(raw_config, target.config)
        if state is None:
            state = random_dflash_state_dict(self.config, dtype=torch.float32, seed=seed)
            if raw_config["dflash_config"].get("variant") == "eagle":  # toy/eagle.py
                h = self.config.model.hidden_size
                gen = torch.Generator().manual_seed(seed + 1)
                state["in_proj.weight"] = torch.randn(h, 2 * h, generator=gen) * 0.02
        self.names = sorted(state)
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(state[n].detach().float().clone()) for n in self.names])

    def state(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.params))

    def drafter(self, target: Target) -> Drafter:
        """The inference Drafter, built differentiably from the parameters (target dtype)."""
        return drafter_from_state_dict(self.config, self.state(), target, "trainable drafter")

    def in_proj(self, target: Target) -> torch.Tensor | None:
        """The EAGLE baseline's input projection in the target's dtype, or None."""
        w = self.state().get("in_proj.weight")
        return None if w is None else w.to(target.dtype)

    def save(self, path: Path, dtype: torch.dtype = torch.bfloat16) -> None:
        """config.json + model.safetensors in the z-lab format that load_dflash reads."""
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(self.raw_config, indent=2))
        save_file({n: p.detach().to(dtype).contiguous().cpu() for n, p in self.state().items()},
                  str(path / "model.safetensors"))


@torch.no_grad()
def target_features(target: Target, ids: torch.Tensor, lens: torch.Tensor,
                    layer_ids: tuple[int, ...]) -> torch.Tensor:
    """Captured target states (bs, S, K*H) of sequences ids (bs, S) with lengths lens (bs,).

    Runs the engine's target forward over a throwaway pool (row b+1 owns slots 1+b*S..);
    padding positions use slot 0 and are never attended to by real tokens.
    """
    bs, s = ids.shape
    cfg, dev = target.config, ids.device
    slots = 1 + torch.arange(bs * s, device=dev).view(bs, s)
    req_to_token = torch.cat([torch.zeros(1, s, dtype=torch.int64, device=dev), slots]).int()
    pool = torch.zeros(2, cfg.num_layers, bs * s + 1, cfg.num_kv_heads, cfg.head_dim,
                       dtype=target.dtype, device=dev)
    positions = torch.arange(s, device=dev).expand(bs, s)
    batch = ForwardBatch(positions, torch.where(positions < lens[:, None], slots, 0),
                         torch.arange(1, bs + 1, device=dev), lens)
    _, aux = target.forward(ids, batch, req_to_token, pool[0], pool[1], capture=layer_ids,
                            fast=False)
    return aux


class BlockLayout(NamedTuple):
    """The valid blocks of a batch as engine requests (one request row per block).

    Block m = (seq[m], anchors[seq[m], j]) at anchor p is request row m+1 of req_to_token
    (M+1, S): its positions w < p map to sequence seq[m]'s context slots 1 + seq*S + w, its
    positions p..p+B-1 to the block's own slots (cache_loc), everything after to slot 0. With
    kv_lens = p + B, a block sees exactly the context strictly before its anchor, itself, and
    no other block. block_ids, positions, cache_loc: (M, B) i64; req_rows, kv_lens: (M,) i64;
    index: (M, 2) i64 (sequence, anchor index) of each block.
    """

    block_ids: torch.Tensor
    positions: torch.Tensor
    cache_loc: torch.Tensor
    req_to_token: torch.Tensor
    req_rows: torch.Tensor
    kv_lens: torch.Tensor
    index: torch.Tensor


def block_layout(ids: torch.Tensor, anchors: torch.Tensor, valid: torch.Tensor,
                 block_size: int, mask_token_id: int) -> BlockLayout:
    """Requests of the valid blocks at `anchors` (bs, N) of sequences ids (bs, S)."""
    bs, s = ids.shape
    dev = ids.device
    index = valid.nonzero()  # (M, 2), invalid blocks dropped: no padding request exists
    m = index.shape[0]
    p = anchors[index[:, 0], index[:, 1]]
    block_ids, positions = block_inputs(ids[index[:, 0]], p[:, None], block_size,
                                        mask_token_id)
    block_ids, positions = block_ids[:, 0], positions[:, 0]
    cache_loc = 1 + bs * s + torch.arange(m * block_size, device=dev).view(m, block_size)
    w = torch.arange(s, device=dev)
    table = torch.where(w[None, :] < p[:, None], 1 + index[:, :1] * s + w[None, :], 0)
    in_block = (w[None, :] >= p[:, None]) & (w[None, :] < p[:, None] + block_size)
    own = cache_loc.gather(1, (w[None, :] - p[:, None]).clamp(0, block_size - 1))
    table = torch.where(in_block, own, table)
    req_to_token = torch.cat([torch.zeros(1, s, dtype=table.dtype, device=dev), table]).int()
    rows = torch.arange(1, m + 1, device=dev)
    return BlockLayout(block_ids, positions, cache_loc, req_to_token, rows, p + block_size,
                       index)


def block_logits(drafter: Drafter, target: Target, features: torch.Tensor,
                 layout: BlockLayout, ids: torch.Tensor | None = None,
                 variant: str = "dflash", in_proj: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """Draft logits (M, B-1, V) of every block of `layout`; column i scores label p+i+1.

    features: (bs, S, K*H) what fc reads per token (`variants.context_features`). The full
    method injects their context K/V at every position of every sequence (slots 1..bs*S),
    as the engine injects committed tokens, then runs the inference `draft_forward` over
    each block's request row. Variants (toy/variants.py): "fusion" runs the
    context through the draft layers instead of injecting; "ar" feeds the teacher-forced
    block ids[p..p+B-1] (ids: (bs, S) required) causally and scores outputs 0..B-2;
    "eagle" unrolls toy/eagle.py's chain (in_proj required).
    """
    cfg = drafter.config.model
    bs, s, _ = features.shape
    dev = features.device
    num_slots = 1 + bs * s + layout.cache_loc.numel()
    # Two tensors, not views of one: autograd tracks in-place writes per base tensor.
    pool = [torch.zeros(cfg.num_layers, num_slots, cfg.num_kv_heads, cfg.head_dim,
                        dtype=target.dtype, device=dev) for _ in range(2)]
    if variant == "eagle":
        return eagle_block_logits(drafter, in_proj, target, ids, features, layout, pool)
    context = context_hidden(drafter, features.reshape(bs * s, -1))
    ctx_slots = 1 + torch.arange(bs * s, device=dev).view(bs, s)
    positions = torch.arange(s, device=dev).expand(bs, s)
    table = layout.req_to_token
    if variant == "fusion":
        table = torch.cat([table, ctx_slots.to(table.dtype)])
        rows = table.shape[0] - bs + torch.arange(bs, device=dev)
        ctx = ForwardBatch(positions, ctx_slots, rows, torch.full((bs,), s, device=dev))
        draft_stack(drafter, target, context.view(bs, s, -1), ctx, table, pool[0], pool[1],
                    causal=True)
    else:
        kv_materialize_ref(context, drafter.w_kv, drafter.k_norm, drafter.cos_sin,
                           positions.reshape(-1), ctx_slots.reshape(-1), pool[0], pool[1],
                           eps=cfg.rms_norm_eps)
    batch = ForwardBatch(layout.positions, layout.cache_loc, layout.req_rows, layout.kv_lens)
    if variant != "ar":
        return draft_forward(drafter, target, layout.block_ids, batch, table, pool[0], pool[1])
    teacher = ids[layout.index[:, :1], layout.positions]  # (M, B): x_p .. x_{p+B-1}
    x = draft_stack(drafter, target, target.embed[teacher], batch, table, pool[0], pool[1],
                    causal=True)
    return target.logits(rms_norm(x[:, :-1], drafter.norm, cfg.rms_norm_eps))
