"""Fine-tune the toy target into a self-speculative model (ISD and LinearSpec), then measure.

    python -m toy.train_selfspec --recipe artifacts/toy --out outputs/selfspec

One training row packs a clean window of a data/train.safetensors sequence (a prompt and the
target's own greedy continuation) and MASK blocks anchored in the continuation, run by one
dense forward with an explicit attention mask:

- clean tokens x_0..x_{L-1}: causal; loss = causal AR cross-entropy on the prompt (real text)
  tokens, so plain decoding keeps its quality;
- ISD block at t: MASK * (N-1) at positions t..t+N-2, seeing clean x_{<t} and earlier masks
  (strict causal); MASK t+j predicts x_{t+j+1} (shifted, I-DLM);
- LinearSpec block at t: [x_t, MASK * (B-1)] at t..t+B-1, seeing clean x_{<t} and the whole
  block (bidirectional); MASK t+j predicts x_{t+j} (unshifted, Nemotron). B alternates 4, 8.

Loss = CE_AR + CE_isd + CE_ls. Writes to --out: model/ (save_pretrained, bf16, with the
tokenizer), metrics.json, results.csv, results.md, selfspec.png: validation AR perplexity
before and after, and greedy tokens per forward of ISD N in {4, 8} and LinearSpec B in
{4, 8} before and after (with ISD's closed form at the measured per-token acceptance), on
the first --eval-prompts of the committed validation set (toy/eval_sets.py; --prompts-from
corpus draws them from this interpreter's stdlib instead).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from common.stamps import stamp
from toy.eval_sets import held_out_prompts
from toy.gen_data import load_dataset
from toy.hf_config import save_pretrained
from toy.tokenizer import EOT, MASK, encode_corpus, load_tokenizer
from toy.train_target import evaluate

ISD_MASKS = 7  # N-1 for N = 8; its first 3 masks are exactly the N = 4 layout (causal)
LS_BLOCKS = (4, 8)


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox rotary embedding of x (bs, heads, T, D) at positions pos (bs, T)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device).float() / d)
    ang = pos[:, None, :, None].float() * inv  # (bs, 1, T, D/2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x.float().chunk(2, dim=-1)
    return (x.float() * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


def dense_forward(model, ids: torch.Tensor, pos: torch.Tensor,
                  allowed: torch.Tensor) -> torch.Tensor:
    """Logits (bs, T, V) of a Qwen3ForCausalLM on ids (bs, T) at positions pos (bs, T),
    query t seeing key s iff allowed[b, t, s] (bs, T, T) bool."""
    cfg, m = model.config, model.model
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", None) or \
        getattr(cfg, "rope_theta", 10000.0)
    bs, t = ids.shape
    x = m.embed_tokens(ids)
    for layer in m.layers:
        a = layer.self_attn
        h = layer.input_layernorm(x)
        q = a.q_norm(a.q_proj(h).view(bs, t, -1, cfg.head_dim)).transpose(1, 2)
        k = a.k_norm(a.k_proj(h).view(bs, t, -1, cfg.head_dim)).transpose(1, 2)
        v = a.v_proj(h).view(bs, t, -1, cfg.head_dim).transpose(1, 2)
        q, k = rope(q, pos, theta), rope(k, pos, theta)
        rep = q.shape[1] // k.shape[1]
        out = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                             v.repeat_interleave(rep, 1),
                                             attn_mask=allowed[:, None])
        x = x + a.o_proj(out.transpose(1, 2).reshape(bs, t, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.lm_head(m.norm(x))


def pack_row(seq: torch.Tensor, prompt_len: int, length: int, mask_id: int, n_isd: int,
             n_ls: int, gen: torch.Generator):
    """(ids, pos, labels, kind, allowed) of one training row from seq (prompt + continuation).

    ids/pos/labels/kind (T,), allowed (T, T); T = L + n_isd*ISD_MASKS + n_ls*sum(LS_BLOCKS)/2
    with L = min(length, len(seq)); labels -100 where there is no loss (AR labels on prompt
    tokens only); kind 0 clean, 1 ISD mask, 2 LinearSpec block.
    """
    seq = seq[:length]
    L = len(seq)
    ids, pos, labels, kind, spans = [seq], [torch.arange(L)], [], [torch.zeros(L)], []
    ar = torch.full((L,), -100)
    ar[: min(prompt_len, L) - 1] = seq[1 : min(prompt_len, L)]
    labels.append(ar)

    def anchor(span: int) -> int:
        lo = max(1, min(prompt_len, L - span))
        return int(torch.randint(lo, max(lo, L - span) + 1, (1,), generator=gen))

    for _ in range(n_isd):
        t = anchor(ISD_MASKS + 1)
        k = min(ISD_MASKS, L - 1 - t)
        ids.append(torch.full((k,), mask_id))
        pos.append(t + torch.arange(k))
        labels.append(seq[t + 1 : t + 1 + k])
        kind.append(torch.full((k,), 1))
        spans.append((t, k, True))
    for i in range(n_ls):
        block = LS_BLOCKS[i % len(LS_BLOCKS)]
        t = anchor(block)
        k = min(block, L - t)
        ids.append(torch.cat([seq[t : t + 1], torch.full((k - 1,), mask_id)]))
        pos.append(t + torch.arange(k))
        labels.append(torch.cat([torch.tensor([-100]), seq[t + 1 : t + k]]))
        kind.append(torch.full((k,), 2))
        spans.append((t, k, False))
    total = sum(len(i) for i in ids)
    allowed = torch.zeros(total, total, dtype=torch.bool)
    allowed[:L, :L] = torch.ones(L, L, dtype=torch.bool).tril()
    start = L
    for t, k, causal in spans:
        allowed[start : start + k, :t] = True
        block = torch.ones(k, k, dtype=torch.bool)
        allowed[start : start + k, start : start + k] = block.tril() if causal else block
        start += k
    return torch.cat(ids), torch.cat(pos), torch.cat(labels), torch.cat(kind).long(), allowed


def batch_of(data, rows: list[int], length: int, mask_id: int, n_blocks: int, gen, device):
    """Stacked (ids, pos, labels, kind, allowed) of sequences `rows`, right-padded (no
    loss; a padding query sees only itself)."""
    packed = []
    for r in rows:
        a, b = int(data.offsets[r]), int(data.offsets[r + 1])
        seq = data.tokens[a:b].long()
        packed.append(pack_row(seq, int(data.prompt_lens[r]), length, mask_id, n_blocks,
                               n_blocks, gen))
    n, t = len(rows), max(len(p[0]) for p in packed)
    out = [torch.zeros(n, t, dtype=torch.long), torch.zeros(n, t, dtype=torch.long),
           torch.full((n, t), -100), torch.zeros(n, t, dtype=torch.long),
           torch.eye(t, dtype=torch.bool).repeat(n, 1, 1)]
    for i, row in enumerate(packed):
        k = len(row[0])
        for j in range(4):
            out[j][i, :k] = row[j]
        out[4][i, :k, :k] = row[4]
    return [x.to(device, non_blocking=True) for x in out]


def losses(model, batch) -> torch.Tensor:
    """(3,) mean CE of the clean AR, ISD and LinearSpec tokens of a batch."""
    ids, pos, labels, kind, allowed = batch
    with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=ids.is_cuda):
        logits = dense_forward(model, ids, pos, allowed).float()
    ce = F.cross_entropy(logits.flatten(0, 1), labels.flatten().clamp(min=0), reduction="none")
    live = (labels.flatten() >= 0).float()
    kinds = F.one_hot(kind.flatten(), 3).float() * live[:, None]  # (bs*T, 3)
    return (ce[:, None] * kinds).sum(0) / kinds.sum(0).clamp(min=1)


def finetune(model, data, args, mask_id: int, device: str) -> dict:
    """AdamW on CE_AR + CE_isd + CE_ls for args.minutes of wall time (or args.steps)."""
    from toy.train_target import lr_at

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    n_seq, history, t0, step = len(data.prompt_lens), [], time.time(), 0
    while (progress := max(step / args.steps, (time.time() - t0) / (60 * args.minutes))) < 1:
        for group in opt.param_groups:
            group["lr"] = lr_at(int(progress * 10_000), 10_000, args.lr)
        rows = torch.randint(0, n_seq, (args.batch,), generator=gen).tolist()
        parts = losses(model, batch_of(data, rows, args.seq_len, mask_id, args.blocks, gen,
                                       device))
        opt.zero_grad(set_to_none=True)
        parts.sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            history.append([step, time.time() - t0, *parts.tolist()])
            print(f"step {step:5d}  ar {history[-1][2]:.3f}  isd {history[-1][3]:.3f}  "
                  f"ls {history[-1][4]:.3f}  {history[-1][1]:6.1f}s", flush=True)
        step += 1
    return {"steps": step, "train_s": time.time() - t0, "history": history}


def measure(model_dir: Path, prompts, mask_id: int, max_new: int, device: str) -> list[dict]:
    """Greedy TPF of ISD N in {4, 8} and LinearSpec B in {4, 8}; plain greedy as reference."""
    from reference.generate import generate
    from reference.loaders import load_target
    from reference.methods import MethodSpec, build
    from reference.methods.isd import ISD, tpf_closed_form

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    target = load_target(model_dir, device=device, dtype=dtype)
    plain = generate(target, prompts, max_new_tokens=max_new).tokens
    rows = []
    specs = [MethodSpec.of("isd", stride=n, mask_token_id=mask_id) for n in (4, 8)]
    specs += [MethodSpec.of("linearspec", block_size=b, mask_token_id=mask_id) for b in (4, 8)]
    for spec in specs:
        mode = build(spec, target)
        out = generate(target, prompts, proposer=mode, max_new_tokens=max_new)
        s, size = out.stats, spec.kwargs.get("stride", spec.kwargs.get("block_size"))
        row = {"mode": spec.name, "size": size, "tokens_per_forward": s["tokens_per_forward"],
               "tau": s["tau"], "acceptance": s["acceptance"], "forwards": s["forwards"],
               "greedy_match": sum(a == b for a, b in zip(out.tokens, plain)) / len(plain)}
        if isinstance(mode, ISD):  # the closed form is ISD's
            row["tpf_closed_form"] = tpf_closed_form(s["acceptance"], size)
            row["tpf_vs_closed_form"] = s["tokens_per_forward"] / row["tpf_closed_form"] - 1
        rows.append(row)
    target.runtime = None
    return rows


def report(out: Path, metrics: dict) -> None:
    """results.csv, results.md and selfspec.png from metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["when", "mode", "size", "tokens_per_forward", "tau", "acceptance",
            "tpf_closed_form", "greedy_match"]
    rows = [{"when": w, **r} for w in ("before", "after") for r in metrics[f"tpf_{w}"]]
    fmt = [{k: (f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k, "")))
            for k in keys} for r in rows]
    (out / "results.csv").write_text("\n".join([",".join(keys)] + [
        ",".join(f[k] for k in keys) for f in fmt]) + "\n")
    md = [f"AR validation perplexity: before {metrics['ppl_before']:.3f}, after "
          f"{metrics['ppl_after']:.3f} ({100 * metrics['ppl_change']:+.2f}%); "
          f"{metrics['steps']} steps in {metrics['train_s']:.0f} s.", "",
          "| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    md += ["| " + " | ".join(f[k] for k in keys) + " |" for f in fmt]
    (out / "results.md").write_text("\n".join(md) + "\n")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    hist = torch.tensor(metrics["history"])
    if len(hist):
        for j, name in enumerate(("AR", "ISD masks", "LinearSpec masks")):
            a.plot(hist[:, 0], hist[:, 2 + j], label=name)
    a.set(xlabel="step", ylabel="cross-entropy", title="fine-tuning losses")
    a.legend()
    labels = [f"{r['mode']} {r['size']}" for r in metrics["tpf_after"]]
    x = torch.arange(len(labels)).float()
    for dx, w in ((-0.2, "before"), (0.2, "after")):
        b.bar(x + dx, [r["tokens_per_forward"] for r in metrics[f"tpf_{w}"]], 0.4, label=w)
    b.scatter(x[:2] + 0.2, [r["tpf_closed_form"] for r in metrics["tpf_after"][:2]],
              color="k", marker="x", label="ISD closed form", zorder=3)
    b.set(xticks=x.tolist(), xticklabels=labels, ylabel="tokens per forward",
          title="greedy, held-out prompts")
    b.legend()
    fig.tight_layout()
    fig.savefig(out / "selfspec.png", dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", type=Path, required=True, help="a finished recipe folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=3.5, help="fine-tuning wall time")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=384)
    ap.add_argument("--blocks", type=int, default=12, help="ISD and LinearSpec blocks per row")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-max-new", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, nargs=2, default=(64, 256))
    ap.add_argument("--max-files", type=int, default=None, help="cap corpus files (CPU)")
    ap.add_argument("--prompts-from", choices=("committed", "corpus"), default="committed",
                    help="the committed validation set (toy/eval_sets.py) or this corpus")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from transformers import Qwen3ForCausalLM

    t0, device = time.time(), "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(args.recipe / "tokenizer" / "tokenizer.json")
    mask_id = tok.token_to_id(MASK)
    from toy.corpus import read_texts

    val = torch.tensor(encode_corpus(tok, read_texts("validation", max_files=args.max_files)),
                       device=device)
    prompts = held_out_prompts(args.recipe / "tokenizer" / "tokenizer.json", "validation",
                               args.eval_prompts, source=args.prompts_from,
                               prompt_len=tuple(args.prompt_len), seed=args.seed,
                               max_files=args.max_files)
    model = Qwen3ForCausalLM.from_pretrained(args.recipe / "target", dtype=torch.float32)
    model.to(device).eval()
    metrics = {"ppl_before": math.exp(evaluate(model, val, args.seq_len, 32, 40)),
               "tpf_before": measure(args.recipe / "target", prompts, mask_id,
                                     args.eval_max_new, device)}
    model.train()
    data = load_dataset(args.recipe / "data" / "train.safetensors")
    metrics.update(finetune(model, data, args, mask_id, device))
    model.eval()
    metrics["ppl_after"] = math.exp(evaluate(model, val, args.seq_len, 32, 40))
    metrics["ppl_change"] = metrics["ppl_after"] / metrics["ppl_before"] - 1
    save_pretrained(model.to(torch.bfloat16), args.out / "model")
    tok.save(str(args.out / "model" / "tokenizer.json"))
    metrics["tpf_after"] = measure(args.out / "model", prompts, mask_id, args.eval_max_new,
                                   device)
    metrics.update(args={k: str(v) for k, v in vars(args).items()}, device=device,
                   stamp=stamp(), mask_token_id=mask_id, eot_id=tok.token_to_id(EOT),
                   wall_s=time.time() - t0)
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    report(args.out, metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))


if __name__ == "__main__":
    main()
