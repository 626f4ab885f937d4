"""Train a DSpark drafter on the toy target (docs/methods.md 1.3).

    python -m toy.train_dspark --target artifacts/toy/target \
        --data artifacts/toy/data/train.safetensors --out artifacts/toy/dspark-g15 --gamma 15

The DFlash recipe (toy/train_dflash.py: frozen shared embedding and head, captured
target features, random anchors, every block of a sequence in one masked attention call:
toy/dense_blocks.py) with DSpark's changes: the block
is gamma tokens `[x_p, MASK * (gamma-1)]` whose slot k scores x_{p+k+1} (the anchor slot is
prediction position 1); logits get the Markov bias W2 W1[x_{p+k}] of the teacher-forced
previous token; the loss is 0.1 CE + 0.9 TV + 1.0 confidence BCE, each position weighted
w_k = exp(-(k-1)/4) (DeepSpec's loss_decay_gamma = 4), where TV = ||q_k - p_k||_1 against
the target's distribution p_k at the same position and the confidence head's soft label is
c*_k = 1 - TV/2 (detached). Saves the DSpark folder
`reference.methods.dspark_proposer.load_dspark` reads.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from reference.loaders import random_dflash_state_dict
from reference.methods.dspark_proposer import HEAD_NAMES, confidence_logit, heads_from_state_dict
from reference.methods.dspark_proposer import markov_logits as _markov_logits
from reference.model import ForwardBatch, Target
from toy.dense_blocks import dense_block_hidden
from toy.draft_model import TrainableDrafter, drafter_config_dict
from toy.gen_data import ToyDataset
from toy.objective import (
    block_targets,
    build_target_layer_ids,
    position_weights,
    random_anchors,
)
from toy.train_dflash import DrafterTrainConfig, add_run_arguments, fit, usable_sequences


@dataclass(frozen=True)
class DSparkTrainConfig(DrafterTrainConfig):
    """One DSpark run: gamma drafted tokens (not DFlash's loss-decay gamma), the Markov rank
    and the loss weights."""

    gamma: int = 15
    markov_rank: int = 128
    loss_decay: float = 4.0
    ce_alpha: float = 0.1
    tv_alpha: float = 0.9
    conf_alpha: float = 1.0

    @property
    def block_size(self) -> int:
        """B = gamma + 1, the verify width (what `usable_sequences` and anchors need)."""
        return self.gamma + 1


class TrainableDSpark(TrainableDrafter):
    """TrainableDrafter plus the Markov head (W2 starts at zero: the bias starts off) and the
    confidence head, under their checkpoint names (HEAD_NAMES of
    reference/methods/dspark_proposer.py)."""

    def __init__(self, raw_config: dict, target: Target, seed: int = 0):
        from reference.config import DFlashConfig

        cfg = DFlashConfig.from_dict(raw_config, target.config)
        rank, v = raw_config["dspark_config"]["markov_rank"], target.config.vocab_size
        gen = torch.Generator().manual_seed(seed + 2)
        state = random_dflash_state_dict(cfg, dtype=torch.float32, seed=seed)
        h = cfg.model.hidden_size
        extra = (
            torch.randn(v, rank, generator=gen) / rank**0.5,
            torch.zeros(v, rank),
            torch.randn(1, h + rank, generator=gen) * 0.02,
            torch.zeros(1),
        )
        super().__init__(raw_config, target, seed, {**state, **dict(zip(HEAD_NAMES, extra))})
        self.rank = rank

    def heads(self, target: Target, drafter):
        return heads_from_state_dict(self.state(), drafter, target.config.vocab_size, self.rank)


@torch.no_grad()
def target_pass(
    target: Target, ids: torch.Tensor, lens: torch.Tensor, layer_ids: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Captured features (bs, S, K*H) and target logits (bs, S, V) of sequences ids (bs, S)."""
    bs, s = ids.shape
    cfg, dev = target.config, ids.device
    slots = 1 + torch.arange(bs * s, device=dev).view(bs, s)
    req_to_token = torch.cat([torch.zeros(1, s, dtype=torch.int64, device=dev), slots]).int()
    shape = (2, cfg.num_layers, bs * s + 1, cfg.num_kv_heads, cfg.head_dim)
    pool = torch.zeros(shape, dtype=target.dtype, device=dev)
    positions = torch.arange(s, device=dev).expand(bs, s)
    batch = ForwardBatch(
        positions,
        torch.where(positions < lens[:, None], slots, 0),
        torch.arange(1, bs + 1, device=dev),
        lens,
    )
    hidden, aux = target.forward(
        ids, batch, req_to_token, pool[0], pool[1], capture=layer_ids, fast=False
    )
    return aux, target.logits(hidden)


def loss_terms(
    target: Target,
    heads,
    h: torch.Tensor,
    prev: torch.Tensor,
    label: torch.Tensor,
    wt: torch.Tensor,
    p_t: torch.Tensor,
    cfg: DSparkTrainConfig,
) -> tuple[torch.Tensor, dict]:
    """Paper eq. 12 over draft slots of any leading shape (...): states h (..., H), the
    teacher-forced previous token prev and label (...) i64, weights wt (...), the target's
    distribution p_t (..., V). Returns the loss and its parts (floats; acc over wt > 0)."""
    log_q = _markov_logits(target.logits(h), heads, prev).log_softmax(-1)
    ce = -log_q.gather(-1, label[..., None])[..., 0]
    tv = (log_q.exp() - p_t).abs().sum(-1)
    z = confidence_logit(h, heads, prev)
    bce = F.binary_cross_entropy_with_logits(z, (1 - 0.5 * tv).detach(), reduction="none")
    norm = wt.sum().clamp_min(1e-6)
    parts = {k: (v * wt).sum() / norm for k, v in (("ce", ce), ("tv", tv), ("bce", bce))}
    loss = cfg.ce_alpha * parts["ce"] + cfg.tv_alpha * parts["tv"] + cfg.conf_alpha * parts["bce"]
    acc = (log_q.argmax(-1) == label)[wt > 0].float().mean()
    return loss, {**{k: float(v.detach()) for k, v in parts.items()}, "acc": float(acc)}


def dspark_loss(
    model: TrainableDSpark,
    target: Target,
    ids: torch.Tensor,
    loss_mask: torch.Tensor,
    lens: torch.Tensor,
    anchors: torch.Tensor,
    valid: torch.Tensor,
    cfg: DSparkTrainConfig,
) -> tuple[torch.Tensor, dict]:
    """The loss of blocks at anchors (bs, N) of sequences ids (bs, S), through the dense
    forward (toy/dense_blocks.py, every slot of the gamma-token block kept)."""
    labels, w = block_targets(
        ids, loss_mask, anchors, valid, position_weights(cfg.block_size, cfg.loss_decay)
    )
    features, t_logits = target_pass(target, ids, lens, model.config.target_layer_ids)
    drafter = model.drafter(target)
    h = dense_block_hidden(
        drafter,
        target,
        features,
        ids,
        lens,
        anchors,
        cfg.gamma,
        model.config.mask_token_id,
        all_columns=True,
    )  # (bs, N, gamma, H)
    wt = w[:, :, 1:]  # slot k scores x_{p+k+1}; 0 on invalid blocks and outside the loss
    keep = wt > 0
    pos = (anchors[:, :, None] + torch.arange(cfg.gamma, device=ids.device)).clamp(
        max=ids.shape[1] - 1
    )  # (bs, N, gamma): p + k, whose token is the teacher-forced previous one
    row = torch.arange(ids.shape[0], device=ids.device)[:, None, None].expand_as(pos)[keep]
    pos = pos[keep]
    p_t = t_logits[row, pos].float().softmax(-1)
    return loss_terms(
        target,
        model.heads(target, drafter),
        h[keep],
        ids[row, pos],
        labels[:, :, 1:][keep],
        wt[keep],
        p_t,
        cfg,
    )


def step_loss(
    model: TrainableDSpark,
    target: Target,
    data: ToyDataset,
    indices: list[int],
    cfg: DSparkTrainConfig,
    gen: torch.Generator,
) -> tuple[torch.Tensor, dict]:
    """Paper eq. 12 on one batch; returns the loss and its parts (floats)."""
    ids, loss_mask, lens = data.batch(indices, target.device)
    anchors, valid = random_anchors(loss_mask, lens, cfg.block_size, cfg.num_anchors, gen)
    return dspark_loss(model, target, ids, loss_mask, lens, anchors, valid, cfg)


def train_dspark(
    target: Target,
    data: ToyDataset,
    out: Path,
    cfg: DSparkTrainConfig,
    mask_token_id: int,
    log_every: int | None = None,
    profile_dir: str | None = None,
) -> dict:
    """Train one DSpark drafter, save it to `out`, return its metrics (as train_dflash);
    profile_dir: `fit`'s profile of steps 10-14 (None: none)."""
    k = cfg.num_features or min(5, max(1, target.config.num_layers - 3))
    raw = drafter_config_dict(
        target.config,
        num_layers=cfg.num_layers,
        block_size=cfg.block_size,
        mask_token_id=mask_token_id,
        target_layer_ids=build_target_layer_ids(target.config.num_layers, k),
    )
    raw["architectures"] = ["DSparkDraftModel"]
    raw["dspark_config"] = {"markov_rank": cfg.markov_rank, "gamma": cfg.gamma}
    model = TrainableDSpark(raw, target, seed=cfg.seed).to(target.device)
    pool = usable_sequences(data, cfg.block_size)
    if not pool:
        raise ValueError(f"no sequence has {2 * cfg.block_size} continuation tokens")
    gen = torch.Generator(device=target.device).manual_seed(cfg.seed)
    metrics = fit(model, pool, cfg, lambda rows: step_loss(model, target, data, rows, cfg, gen),
                  f"dspark g={cfg.gamma}", log_every, profile_dir)
    model.save(out)
    metrics["config"] = asdict(cfg)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def main() -> None:
    from reference.loaders import load_target
    from toy.gen_data import load_dataset
    from toy.tokenizer import MASK, load_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, required=True, help="target dir with tokenizer.json")
    ap.add_argument("--tokenizer", type=Path, default=None, help="default: <target>/tokenizer.json")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    d = DSparkTrainConfig()
    ints = ("gamma", "markov_rank", "num_layers", "num_anchors", "batch", "steps")
    for name in ints:
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name))
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--max-minutes", type=float, default=None)
    add_run_arguments(ap, compile_flag=False)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    target = load_target(args.target, device=dev, dtype=dtype)
    tok = load_tokenizer(args.tokenizer or args.target / "tokenizer.json")
    names = (*ints, "lr", "max_minutes")
    cfg = DSparkTrainConfig(**{n: getattr(args, n) for n in names})
    metrics = train_dspark(target, load_dataset(args.data), args.out, cfg, tok.token_to_id(MASK),
                           profile_dir=args.profile)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))


if __name__ == "__main__":
    main()
