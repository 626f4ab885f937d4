"""Tensor parallelism of the reference engine over torch.distributed (Megatron-style).

Each of N ranks holds every layer's share of the heads: the q/k/v rows of nh/N query heads
and nkv/N KV heads and the gate/up rows of I/N intermediate channels (column-parallel), the
matching columns of o and down (row-parallel); the embedding, the norms and the head stay
whole. A layer is then the single-device layer with one all-reduce (sum) after o and one
after down (`Target.run_layers` passes `TensorParallel.all_reduce`), so every rank sees the
whole residual stream. The paged KV pool of a rank holds its nkv/N heads (the pool is sized
from the rank's config). A DFlash drafter is sharded the same way, or kept whole on every
rank (`drafter="replicate"`: no all-reduce in the draft, N times its weights and draft KV).

Decisions are made once: the accepted tokens of a round and the token after a prefill are
rank 0's, broadcast to the others (`agree`, `Engine`), and the serving loop's clock is rank
0's (`decide`), so every rank admits, commits and stops alike. Ranks of one host launch with
torchrun (`init` reads RANK, WORLD_SIZE, LOCAL_RANK); NCCL on CUDA, gloo on the CPU, plus a
gloo group for host-side decisions. Each rank captures its own CUDA graphs, the collectives
inside them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from reference.config import ModelConfig
from reference.kv_pool import KVShape
from reference.methods.dflash_drafter import Drafter
from reference.model import LayerWeights, Target
from reference.proposers import Accepted, StepOutput

DRAFTER_MODES = ("shard", "replicate")


@dataclass(frozen=True)
class TensorParallel:
    """This process's place in a TP group: rank of size; group, the device group (NCCL on
    CUDA, gloo on the CPU); host, a gloo group for host values; device, this rank's device;
    drafter, how DFlash drafters are placed (DRAFTER_MODES)."""

    rank: int
    size: int
    group: Any
    host: Any
    device: str
    drafter: str = "shard"

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over the ranks, in place; returns x (bs, T, H)."""
        dist.all_reduce(x, group=self.group)
        return x

    def broadcast(self, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Rank 0's values of integer `tensors` on every rank, in one collective (packed as
        i64); returns new tensors of the same shapes and dtypes."""
        flat = torch.cat([t.reshape(-1).long() for t in tensors])
        dist.broadcast(flat, src=dist.get_global_rank(self.group, 0), group=self.group)
        parts = flat.split([t.numel() for t in tensors])
        return tuple(p.view(t.shape).to(t.dtype) for p, t in zip(parts, tensors))

    def agree(self, accepted: Accepted) -> Accepted:
        """The accept stage's result as rank 0 decided it, on every rank."""
        path = () if accepted.path is None else (accepted.path,)
        got = self.broadcast((*accepted.out, *path))
        return Accepted(StepOutput(*got[:4]), got[4] if path else None)

    def decide(self, value: float) -> float:
        """Rank 0's `value` (a host float: the serving loop's clock) on every rank."""
        t = torch.tensor([value], dtype=torch.float64)
        dist.broadcast(t, src=dist.get_global_rank(self.host, 0), group=self.host)
        return float(t.item())


def init(size: int, device_type: str, drafter: str = "shard") -> TensorParallel:
    """Join the TP group of `size` ranks torchrun started (or the spawned test's, with the
    same variables); device_type 'cuda' (NCCL, cuda:LOCAL_RANK) or 'cpu' (gloo).

    Raises ValueError when WORLD_SIZE is not `size` or `drafter` is not a DRAFTER_MODES.
    """
    if drafter not in DRAFTER_MODES:
        raise ValueError(f"drafter placement must be one of {DRAFTER_MODES}, got {drafter!r}")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != size:
        raise ValueError(f"--tp {size} needs {size} processes (torchrun --nproc-per-node "
                         f"{size}); this process sees WORLD_SIZE={world}")
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device_type == "cuda"
    device = f"cuda:{local}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    group = dist.group.WORLD
    host = dist.new_group(backend="gloo") if cuda else group
    tp = TensorParallel(rank, size, group, host, device, drafter)
    tp.all_reduce(torch.zeros(1, device=device))  # communicators exist before any capture
    return tp


def split_config(cfg: ModelConfig, size: int) -> ModelConfig:
    """One rank's ModelConfig: nh/size query heads, nkv/size KV heads, I/size channels.
    Raises ValueError naming the field `size` does not divide."""
    for name, n in (("num_attention_heads", cfg.num_heads),
                    ("num_key_value_heads", cfg.num_kv_heads),
                    ("intermediate_size", cfg.intermediate_size)):
        if n % size:
            raise ValueError(f"tensor parallel size {size} does not divide {name}={n}")
    return dataclasses.replace(cfg, num_heads=cfg.num_heads // size,
                               num_kv_heads=cfg.num_kv_heads // size,
                               intermediate_size=cfg.intermediate_size // size)


def shard_layer(w: LayerWeights, cfg: ModelConfig, rank: int, size: int) -> LayerWeights:
    """Rank `rank`'s share of layer w (whole-model cfg): wqkv (nh*D + 2*nkv*D, H) -> its
    q, k and v head rows ((nh + 2*nkv)*D/size, H); w_gate_up (2*I, H) -> its gate and up rows
    (2*I/size, H); wo (H, nh*D) and w_down (H, I) -> their matching columns. Norms whole.
    Raises ValueError on an MoE layer: its experts are not sharded (no expert parallelism)."""
    if w.router is not None:
        raise ValueError("--tp: an MoE target's expert layers are not sharded; run it at tp 1")
    d = cfg.head_dim
    q, k, v = w.wqkv.split([cfg.num_heads * d, cfg.num_kv_heads * d, cfg.num_kv_heads * d])
    gate, up = w.w_gate_up.chunk(2)

    def rows(*parts: torch.Tensor) -> torch.Tensor:
        return torch.cat([p.chunk(size)[rank] for p in parts]).contiguous()

    return w._replace(wqkv=rows(q, k, v), w_gate_up=rows(gate, up),
                      wo=w.wo.chunk(size, dim=1)[rank].contiguous(),
                      w_down=w.w_down.chunk(size, dim=1)[rank].contiguous())


def gather_layer(shards: list[LayerWeights], cfg: ModelConfig) -> LayerWeights:
    """The whole layer from its `shard_layer` shares (rank order; cfg: whole-model)."""
    n, d = len(shards), cfg.head_dim
    local = [cfg.num_heads * d // n, cfg.num_kv_heads * d // n, cfg.num_kv_heads * d // n]
    qkv = [s.wqkv.split(local) for s in shards]
    gate_up = [s.w_gate_up.chunk(2) for s in shards]
    return shards[0]._replace(
        wqkv=torch.cat([torch.cat([p[j] for p in qkv]) for j in range(3)]),
        w_gate_up=torch.cat([torch.cat([p[j] for p in gate_up]) for j in range(2)]),
        wo=torch.cat([s.wo for s in shards], dim=1),
        w_down=torch.cat([s.w_down for s in shards], dim=1))


def shard_target(target: Target, tp: TensorParallel) -> Target:
    """This rank's share of a whole target (same weights on every rank): its layers'
    shards, its head counts in the config, `tp` set, no runtime (the pool is rebuilt for
    the rank's heads)."""
    if target.tp is not None:
        raise ValueError("the target is already sharded")
    cfg = split_config(target.config, tp.size)
    layers = [shard_layer(w, target.config, tp.rank, tp.size) for w in target.layers]
    return dataclasses.replace(target, config=cfg, layers=layers, tp=tp, runtime=None)


def shard_method(proposer, tp: TensorParallel):
    """The proposer of a sharded target with its DFlash drafter placed as tp.drafter says
    (sharded: heads split like the target's, `Drafter.shards` = size; replicated: whole).
    Methods without a model of their own pass through, an oracle with its shadow's. Raises
    ValueError for a method whose own draft model is not a DFlash drafter."""
    drafter = getattr(proposer, "drafter", None)
    if proposer is None or (drafter is None and proposer.draft_kv is None):
        return proposer
    shadow = getattr(proposer, "shadow", None)
    if shadow is not None:  # the oracle's real proposer, built for this target already
        proposer.draft_kv = shard_method(shadow, tp).draft_kv
        return proposer
    if not isinstance(drafter, Drafter):
        raise ValueError(f"{type(proposer).__name__} has a draft model of its own, which "
                         "tensor parallelism does not shard (DFlash drafters only)")
    if tp.drafter == "shard" and drafter.shards == 1:
        proposer.drafter = drafter = shard_drafter(drafter, tp)
    m = drafter.config.model
    proposer.draft_kv = KVShape(m.num_layers, m.num_kv_heads, m.head_dim)
    return proposer


def shard_drafter(drafter: Drafter, tp: TensorParallel) -> Drafter:
    """Rank tp.rank's share of a whole DFlash drafter: layers as `shard_layer`, w_kv
    rebuilt from their K/V rows (L, 2*nkv*D/size, H); fc, norms and RoPE whole."""
    m = drafter.config.model
    layers = [shard_layer(w, m, tp.rank, tp.size) for w in drafter.layers]
    local = split_config(m, tp.size)
    q_rows = local.num_heads * local.head_dim
    return dataclasses.replace(
        drafter, config=dataclasses.replace(drafter.config, model=local), layers=layers,
        w_kv=torch.stack([w.wqkv[q_rows:] for w in layers]).contiguous(), shards=tp.size)
