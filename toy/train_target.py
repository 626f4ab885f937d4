"""Train the toy world's target: a Qwen3 decoder on the stdlib corpus, from scratch.

    python -m toy.train_target --size small --out artifacts/toy/small

Sizes (one script): `micro` (a few CPU steps, for tests), `small` (~7M parameters, the one
committed to the zoo) and `base` (~30M, trained on demand). bf16 autocast on the GPU, AdamW,
linear warmup then cosine decay, and early stopping: the train split (~9M tokens) is
memorized within a few epochs, so validation loss is checked 20 times per run and the
best weights are kept. `--dropout P` adds residual and attention dropout while training:
without it the 30M `base` memorizes the split within a few hundred steps and ends at a
worse validation loss than `small`; with P = 0.3 it beats it. `--max-repetition R`
trains on the train files whose token 4-gram repetition is at most R (`drop_repetitive`:
test files and tables repeat themselves, and a target trained on them may loop more);
validation is never filtered. `--repetition-cut FRAC --tokenizer T` prints the R that drops
the most repetitive files holding FRAC of the train tokens (`repetition_cut`: the same
share on any stdlib installation). The model is a `transformers.Qwen3ForCausalLM` saved
with `save_pretrained` (toy/hf_config.py: rope_theta also at the top level), so
transformers 4.5x and 5.x and `reference.load_target` read it. Writes `metrics.json`
(validation loss and perplexity, the validation curve, tokens seen, wall time) next to the
weights.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from common.repetition import repetition_rate
from toy.corpus import read_texts
from toy.hf_config import save_pretrained
from toy.tokenizer import EOT, MASK, encode_corpus, load_tokenizer, train_tokenizer


@dataclass(frozen=True)
class TargetSize:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    seq_len: int
    batch: int
    steps: int
    lr: float


SIZES = {
    "micro": TargetSize(64, 2, 2, 1, 32, 128, 64, 8, 30, 3e-3),
    "small": TargetSize(256, 6, 4, 2, 64, 768, 512, 64, 1200, 2e-3),
    "base": TargetSize(512, 8, 8, 4, 64, 1536, 512, 64, 1500, 1e-3),
}


def qwen3_config(size: TargetSize, vocab_size: int, eot_id: int):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.head_dim,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=eot_id,
        eos_token_id=eot_id,
    )


def add_dropout(model, p: float) -> None:
    """Dropout on every residual branch (attention's o_proj, the MLP) and on the attention
    probabilities, active in train mode only: the regularizer of a model larger than its
    data. Hooks leave the architecture, and so the saved checkpoint, a plain Qwen3."""
    if p <= 0:
        return
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = p
        for branch in (layer.self_attn.o_proj, layer.mlp):
            branch.register_forward_hook(
                lambda mod, args, out: torch.nn.functional.dropout(out, p, mod.training))


def lr_at(step: int, total: int, peak: float, warmup_frac: float = 0.04) -> float:
    """Linear warmup over `warmup_frac` of the steps, then cosine decay to 10% of peak."""
    warmup = max(1, int(total * warmup_frac))
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def repetition(ids: list[int], n: int = 4) -> float:
    """One training file's `repetition_rate` (common/repetition.py): its n-grams equal to
    an earlier n-gram of it, over its n-grams; 0 with fewer than n ids."""
    return repetition_rate([ids], n)


def drop_repetitive(texts: list[str], tok, max_rep: float) -> tuple[list[str], dict]:
    """The texts whose token 4-gram `repetition` (by `tok`'s ids) is at most `max_rep`, in
    order, and what was dropped: files kept and dropped, the fraction of tokens kept."""
    if not 0.0 <= max_rep <= 1.0:
        raise ValueError(f"max_rep must be in [0, 1], got {max_rep}")
    ids = [enc.ids for enc in tok.encode_batch(texts)]
    keep = [repetition(x) <= max_rep for x in ids]
    total = sum(map(len, ids))
    kept_tokens = sum(len(x) for x, k in zip(ids, keep) if k)
    stats = {"train_files_kept": sum(keep), "train_files_dropped": len(keep) - sum(keep),
             "train_tokens_kept_frac": kept_tokens / total if total else 1.0}
    return [t for t, k in zip(texts, keep) if k], stats


def repetition_cut(texts: list[str], tok, drop_frac: float) -> float:
    """The R for `drop_repetitive` that drops the most repetitive files holding at most
    `drop_frac` of the tokens: files taken from the most repetitive down while their tokens
    fit, R the repetition of the first file that does not (a machine-independent rule: the
    stdlib, and so the rate of its most repetitive files, differs between installations)."""
    if not 0.0 <= drop_frac < 1.0:
        raise ValueError(f"drop_frac must be in [0, 1), got {drop_frac}")
    ids = [enc.ids for enc in tok.encode_batch(texts)]
    if not ids:
        raise ValueError("texts is empty")
    total, dropped = sum(map(len, ids)), 0
    for rate, n in sorted(((repetition(x), len(x)) for x in ids), reverse=True):
        if dropped + n > drop_frac * total:
            return rate
        dropped += n
    raise AssertionError("unreachable: drop_frac < 1 keeps a file")


def random_windows(stream: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator):
    """(batch, seq_len + 1) windows at random offsets of a 1-D token stream."""
    starts = torch.randint(0, stream.numel() - seq_len - 1, (batch,), generator=gen)
    idx = starts[:, None] + torch.arange(seq_len + 1)
    return stream[idx.to(stream.device)]


@torch.no_grad()
def evaluate(model, stream: torch.Tensor, seq_len: int, batch: int, max_batches: int) -> float:
    """Mean next-token cross-entropy over non-overlapping windows of `stream`, in eval mode
    (no dropout; the training loop switches back)."""
    model.eval()
    n = (stream.numel() - 1) // seq_len
    windows = stream[: n * seq_len + 1]
    losses = []
    for b0 in range(0, min(n, batch * max_batches), batch):
        rows = torch.arange(b0, min(b0 + batch, n), device=stream.device)
        idx = rows[:, None] * seq_len + torch.arange(seq_len + 1, device=stream.device)
        x = windows[idx]
        with torch.autocast(stream.device.type, dtype=torch.bfloat16, enabled=x.is_cuda):
            logits = model(input_ids=x[:, :-1]).logits.float()
        losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()))
    return float(torch.stack(losses).mean())


def train_target(size_name: str, out: Path, *, tokenizer_path: Path | None = None,
                 steps: int | None = None, max_files: int | None = None, seed: int = 0,
                 device: str | None = None, max_minutes: float | None = None,
                 dropout: float = 0.0, max_repetition: float | None = None) -> dict:
    """Train one target size; returns the metrics also written to `out/metrics.json`.

    max_minutes: the schedule runs on wall time when that ends before `steps` (a stage
    time limit); metrics then report the steps done. max_repetition: train on the train
    files `drop_repetitive` keeps (the tokenizer, when trained here, sees every file).
    """
    from transformers import Qwen3ForCausalLM

    size = SIZES[size_name]
    steps = steps or size.steps
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    train_texts = read_texts("train", max_files=max_files)
    val_texts = read_texts("validation", max_files=max_files and max(1, max_files // 10))
    if tokenizer_path is not None and tokenizer_path.exists():
        tok = load_tokenizer(tokenizer_path)
    else:
        tok = train_tokenizer(train_texts)
    tok.save(str(out / "tokenizer.json"))
    filtered = {}
    if max_repetition is not None:
        train_texts, filtered = drop_repetitive(train_texts, tok, max_repetition)
        print(f"max_repetition {max_repetition}: {filtered}", flush=True)
    train = torch.tensor(encode_corpus(tok, train_texts), dtype=torch.long, device=device)
    val = torch.tensor(encode_corpus(tok, val_texts), dtype=torch.long, device=device)

    torch.manual_seed(seed)
    cfg = qwen3_config(size, tok.get_vocab_size(), tok.token_to_id(EOT))
    model = Qwen3ForCausalLM(cfg).to(device)
    add_dropout(model, dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=size.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=device == "cuda")
    gen = torch.Generator().manual_seed(seed)
    losses, t0, step = [], time.time(), 0
    best, val_curve = (math.inf, 0, None), []  # (val loss, step, weights) of the best check
    while (progress := max(step / steps, (time.time() - t0) / (60 * max_minutes)
                           if max_minutes else 0.0)) < 1.0:
        for group in opt.param_groups:
            group["lr"] = lr_at(int(progress * 10_000), 10_000, size.lr)
        x = random_windows(train, size.batch, size.seq_len, gen)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=x[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
        if step % max(1, steps // 20) == 0 or step == steps - 1:
            check = evaluate(model, val, size.seq_len, size.batch, max_batches=4)
            model.train()
            val_curve.append({"step": step, "train": float(losses[-1]), "val": check})
            if check < best[0]:
                best = (check, step, {k: v.detach().clone() for k, v in
                                      model.state_dict().items()})
            print(f"step {step:5d}/{steps}  loss {float(losses[-1]):.3f}  val {check:.3f}  "
                  f"{time.time() - t0:6.1f}s", flush=True)
        step += 1
    model.load_state_dict(best[2])  # early stopping: the small corpus is soon memorized
    val_loss = evaluate(model, val, size.seq_len, size.batch, max_batches=50)
    metrics = {
        "size": size_name, "params": sum(p.numel() for p in model.parameters()),
        "steps": step, "tokens_seen": step * size.batch * size.seq_len,
        "train_loss_first": float(losses[0]), "train_loss_last": float(losses[-1]),
        "val_loss": val_loss, "val_ppl": math.exp(val_loss), "wall_s": time.time() - t0,
        "best_step": best[1], "val_curve": val_curve,
        "seed": seed, "mask_token_id": tok.token_to_id(MASK), "config": asdict(size),
        "dropout": dropout, "max_repetition": max_repetition, **filtered,
    }
    save_pretrained(model.to(torch.bfloat16), out)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--out", type=Path, default=None, help="where the target goes (required)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="reuse this tokenizer.json")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--max-files", type=int, default=None, help="cap corpus files (tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=None, help="wall-time budget")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="residual and attention dropout while training")
    ap.add_argument("--max-repetition", type=float, default=None,
                    help="drop train files whose token 4-gram repetition is above this")
    ap.add_argument("--repetition-cut", type=float, default=None, metavar="FRAC",
                    help="print the --max-repetition that drops the most repetitive train "
                         "files holding FRAC of the tokens (needs --tokenizer) and exit")
    args = ap.parse_args()
    if args.repetition_cut is not None:
        if args.tokenizer is None:
            ap.error("--repetition-cut needs --tokenizer")
        print(repetition_cut(read_texts("train", max_files=args.max_files),
                             load_tokenizer(args.tokenizer), args.repetition_cut))
        return
    if args.out is None:
        ap.error("--out is required")
    metrics = train_target(args.size, args.out, tokenizer_path=args.tokenizer, steps=args.steps,
                           max_files=args.max_files, seed=args.seed,
                           max_minutes=args.max_minutes, dropout=args.dropout,
                           max_repetition=args.max_repetition)
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
