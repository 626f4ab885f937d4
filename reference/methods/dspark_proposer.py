"""The DSpark proposer: DFlash backbone + sequential Markov head + confidence head.

docs/methods.md 1.2. The backbone is the DFlash drafter (same layers,
fc/hidden_norm KV injection of committed context, reference/methods/dflash_drafter.py), but
the anchor slot is itself prediction position 1: gamma inputs `[x0, MASK * (gamma-1)]` at positions
p..p+gamma-1 give gamma hidden states h_k, k = 1..gamma, and base logits U_k = head(h_k) that
score x_k at position p+k. The verify block is B = gamma + 1 tokens `[x0, x_1 .. x_gamma]`.
Drafts are sampled left to right with a rank-r Markov bias, logits_k = U_k + W2 W1[x_{k-1}],
q_k = softmax(logits_k / T) (argmax at T = 0), so rejection sampling stays exact. The
confidence head scores c_k = sigmoid(w . [h_k ; W1[x_{k-1}]] + b), calibrated by per-position
temperatures (reference/dspark_calibrate.py), and a `Scheduler` (common/dspark_schedule.py)
turns them into per-request verify lengths l_r; verification then accepts at most l_r drafts.

Checkpoint: the z-lab DFlash folder (config.json with `dspark_config: {markov_rank}` added,
block_size = gamma + 1) whose safetensors also hold `markov_head.embed.weight` (V, r),
`markov_head.proj.weight` (V, r), `confidence_head.weight` (1, H + r) and
`confidence_head.bias` (1,); an optional calibration.json holds {"temperatures": [gamma]}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from common.dspark_schedule import Scheduler
from reference.config import ConfigError, DFlashConfig
from reference.methods.dflash_drafter import DFlashProposer, Drafter, draft_stack
from reference.model import ForwardBatch, Target, rms_norm
from reference.proposers import Proposal, Round

HEAD_NAMES = (
    "markov_head.embed.weight",
    "markov_head.proj.weight",
    "confidence_head.weight",
    "confidence_head.bias",
)


@dataclass
class Heads:
    """DSpark's extra heads. w1: (V, r) W1 embedding; w2: (V, r) W2 (logit projection, as
    nn.Linear(r, V).weight); conf_w: (1, H + r); conf_b: (1,); temps: (gamma,) fp32 STS."""

    w1: torch.Tensor
    w2: torch.Tensor
    conf_w: torch.Tensor
    conf_b: torch.Tensor
    temps: torch.Tensor


def heads_from_state_dict(
    weights: dict, drafter: Drafter, vocab: int, rank: int, temps: torch.Tensor | None = None
) -> Heads:
    """Heads from DSpark tensor names (HEAD_NAMES), cast to the drafter's device and dtype."""
    ref = drafter.fc
    h = drafter.config.model.hidden_size
    shapes = dict(zip(HEAD_NAMES, ((vocab, rank), (vocab, rank), (1, h + rank), (1,))))
    out = []
    for name, shape in shapes.items():
        if name not in weights:
            raise ConfigError(f"dspark checkpoint: missing weight '{name}'")
        if tuple(weights[name].shape) != shape:
            raise ConfigError(
                f"dspark checkpoint: weight '{name}' has shape "
                f"{tuple(weights[name].shape)}, expected {shape}"
            )
        out.append(weights[name].to(device=ref.device, dtype=ref.dtype))
    gamma = drafter.config.block_size - 1
    temps = torch.ones(gamma) if temps is None else temps
    return Heads(*out, temps.to(device=ref.device, dtype=torch.float32))


def dspark_hidden(
    drafter: Drafter,
    target: Target,
    block_ids: torch.Tensor,
    batch: ForwardBatch,
    req_to_token: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
) -> torch.Tensor:
    """Final-normed hidden (bs, gamma, H) of blocks block_ids (bs, gamma) = [x0, MASK ...].

    Writes the block's K/V at batch.cache_loc; batch.kv_lens = prefix + gamma.
    """
    x = draft_stack(drafter, target, target.embed[block_ids], batch, req_to_token, k_pool,
                    v_pool, causal=False)
    return rms_norm(x, drafter.norm, drafter.config.model.rms_norm_eps)


def markov_logits(base: torch.Tensor, heads: Heads, prev: torch.Tensor) -> torch.Tensor:
    """U + W2 W1[prev]: base (..., V), prev (...) i64 -> (..., V) fp32."""
    return base.float() + (heads.w1[prev] @ heads.w2.t()).float()


def confidence_logit(h: torch.Tensor, heads: Heads, prev: torch.Tensor) -> torch.Tensor:
    """w . [h_k ; W1[x_{k-1}]] + b: h (..., H), prev (...) -> (...) fp32 (uncalibrated)."""
    z = torch.cat([h, heads.w1[prev]], dim=-1) @ heads.conf_w.t() + heads.conf_b
    return z[..., 0].float()


def markov_sample(
    h: torch.Tensor,
    base: torch.Tensor,
    heads: Heads,
    anchor: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Sequential sampling of the gamma drafts and their calibrated confidences.

    Args:
        h: (bs, gamma, H) backbone hidden; base: (bs, gamma, V) U = head(h); anchor: (bs,).
    Returns: drafts (bs, gamma) i64, q (bs, gamma, V) fp32 (None at T = 0: one-hot drafts),
        c (bs, gamma) fp32 calibrated confidences c_k (k-th uses the sampled x_{k-1}).
    """
    prev, drafts, qs, zs = anchor, [], [], []
    for k in range(base.shape[1]):
        logits = markov_logits(base[:, k], heads, prev)
        zs.append(confidence_logit(h[:, k], heads, prev))
        if temperature <= 0:
            prev = logits.argmax(dim=-1)
        else:
            q = (logits / temperature).softmax(dim=-1)
            prev = torch.multinomial(q, 1, generator=generator)[:, 0]
            qs.append(q)
        drafts.append(prev)
    c = torch.sigmoid(torch.stack(zs, dim=1) / heads.temps)
    return torch.stack(drafts, dim=1), torch.stack(qs, dim=1) if qs else None, c


class DSparkProposer(DFlashProposer):
    """DSpark drafts with per-request verify lengths from `scheduler` (default: full).

    temperature: the draft's sampling temperature (0: argmax); any value keeps decoding
    lossless, matching generate's temperature maximises acceptance. With `records` a list,
    every round appends (c (n, gamma), l (n,), accept_len (n,)) of its real rows (on the
    host: its commit stays out of the verify graph).
    """

    commit_in_graph = False

    def __init__(
        self,
        drafter: Drafter,
        heads: Heads,
        target: Target,
        scheduler: Scheduler | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        records: list | None = None,
    ):
        super().__init__(drafter, target)
        self.heads, self.scheduler = heads, scheduler or Scheduler("full")
        self.temperature, self.seed, self.records = temperature, seed, records
        self.gamma = self.block_size - 1

    def bind(self, target: Target, pool, graphs, *args) -> None:
        super().bind(target, pool, graphs, *args)
        self._gen = torch.Generator(device=target.device).manual_seed(self.seed)

    def propose(self, rnd: Round) -> Proposal:
        g = self.gamma
        batch = ForwardBatch(
            rnd.positions[:, :g], rnd.cache_loc[:, :g], rnd.req_rows, rnd.prefix_lens + g
        )
        h = dspark_hidden(
            self.drafter,
            self.target,
            rnd.block_ids[:, :g],
            batch,
            self.pool.req_to_token,
            self.pool.draft_k,
            self.pool.draft_v,
        )
        drafts, q, c = markov_sample(
            h, self.target.logits(h), self.heads, rnd.verified_id, self.temperature, self._gen
        )
        ell = torch.tensor(self.scheduler(c.cpu().numpy()), dtype=torch.int64, device=drafts.device)
        self._last = (c, ell)
        return Proposal(torch.cat([rnd.verified_id[:, None], drafts], dim=1), q, ell)

    def commit(self, rnd: Round, proposal: Proposal, verified, accepted) -> None:
        super().commit(rnd, proposal, verified, accepted)
        commit_lens = accepted.out.commit_lens
        if self.records is not None:
            keep = commit_lens > 0
            c, ell = self._last
            self.records.append(
                (c[keep].cpu(), ell[keep].cpu(), (commit_lens[keep] - 1).long().cpu())
            )


def load_dspark(
    path,
    target: Target,
    *,
    scheduler: Scheduler | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    records: list | None = None,
) -> DSparkProposer:
    """Load a DSpark folder (module docstring) for `target`."""
    from reference.loaders import read_safetensors
    from reference.methods.dflash_drafter import drafter_from_state_dict

    directory = Path(path)
    raw = json.loads((directory / "config.json").read_text())
    where = f"{directory}/config.json"
    cfg = DFlashConfig.from_dict(raw, target.config, None, where)
    rank = (raw.get("dspark_config") or {}).get("markov_rank")
    if not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"{where}: field 'dspark_config.markov_rank' must be a positive int")
    weights = read_safetensors(directory)
    drafter = drafter_from_state_dict(cfg, weights, target, str(directory))
    calib = directory / "calibration.json"
    temps = torch.tensor(json.loads(calib.read_text())["temperatures"]) if calib.is_file() else None
    heads = heads_from_state_dict(weights, drafter, target.config.vocab_size, rank, temps)
    return DSparkProposer(drafter, heads, target, scheduler, temperature, seed, records)
