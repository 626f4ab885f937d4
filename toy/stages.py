"""The stages of the toy recipe (toy/recipe.py): each writes one folder, returns metrics.

tokenizer -> target -> data -> drafter (one per block size) -> evaluate. The evaluation
decodes held-out test prompts greedily with and without each drafter and reports tau, the
commit-length histogram, how many requests match plain greedy token for token, the tokens/s
of both (wall-clock on whatever device ran it) and three held-out completions as text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from reference.generate import generate
from reference.model import Target
from toy import eval_sets
from toy.corpus import fingerprint, read_texts
from toy.gen_data import gen_data, load_dataset
from toy.tokenizer import EOT, MASK, load_tokenizer, train_tokenizer
from toy.train_dflash import DFlashTrainConfig, TrainRun, train_dflash
from toy.train_target import train_target


def tokenizer(out: Path, vocab: int, max_files: int | None) -> dict:
    tok = train_tokenizer(read_texts("train", max_files=max_files), vocab_size=vocab)
    tok.save(str(out / "tokenizer.json"))
    return {"vocab_size": tok.get_vocab_size(), "eot_id": tok.token_to_id(EOT),
            "mask_id": tok.token_to_id(MASK), "corpus": fingerprint("train", max_files)}


def target(out: Path, recipe, tok_path: Path, device: str) -> dict:
    return train_target(recipe.size, out, tokenizer_path=tok_path, steps=recipe.target_steps,
                        max_files=recipe.max_files, seed=recipe.seed, device=device,
                        max_minutes=recipe.target_minutes, dropout=recipe.target_dropout or 0.0,
                        max_repetition=recipe.target_max_repetition)


def data(out: Path, tgt: Target, tok_path: Path, recipe) -> dict:
    lo, hi = recipe.prompt_len
    metrics = gen_data(tgt, load_tokenizer(tok_path), out / "train.safetensors",
                       num_prompts=recipe.num_prompts, min_len=lo, max_len=hi,
                       max_new=recipe.max_new, batch_size=recipe.gen_batch, seed=recipe.seed,
                       max_files=recipe.max_files, max_minutes=recipe.data_minutes)
    release(tgt)
    return metrics


def drafter(out: Path, tgt: Target, tok_path: Path, data_path: Path,
            cfg: DFlashTrainConfig, run: TrainRun | None = None) -> dict:
    mask_id = load_tokenizer(tok_path).token_to_id(MASK)
    metrics = train_dflash(tgt, load_dataset(data_path), out, cfg, mask_id, run=run)
    shutil.copy(tok_path, out / "tokenizer.json")
    return {k: v for k, v in metrics.items() if k != "history"}


def evaluate(out: Path, tgt: Target, tok_path: Path, recipe, drafter_stages: list[str]
             ) -> dict:
    """Greedy decoding of held-out test prompts: plain, then with every drafter (each timed
    on its second run). The prompts are the committed test set's (toy/eval_sets.py) when
    the recipe's prompt rule is the one it was drawn with, else drawn from the corpus."""
    from reference.methods import build
    from reference.methods.variants import drafter_spec

    tok = load_tokenizer(tok_path)
    committed = (tuple(recipe.prompt_len), recipe.max_files) == (eval_sets.PROMPT_LEN, None)
    source = "committed" if committed else "corpus"
    prompts = eval_sets.held_out_prompts(tok_path, "test", recipe.eval_prompts, source=source,
                                         prompt_len=recipe.prompt_len, seed=recipe.seed + 1,
                                         max_files=recipe.max_files)
    kw = dict(max_new_tokens=recipe.eval_max_new, stop_token_ids=(tok.token_to_id(EOT),))
    generate(tgt, prompts, **kw)  # warm-up: every batch size's compile and graphs untimed
    plain = generate(tgt, prompts, **kw)
    result = {"prompts": len(prompts), "prompt_source": source,
              "ar_tokens_per_s": plain.stats["tokens_per_s"],
              "samples": [{"prompt": tok.decode(p), "completion": tok.decode(c)}
                          for p, c in zip(prompts[:3], plain.tokens)]}
    for stage in drafter_stages:
        proposer = build(drafter_spec(out / stage), tgt)
        generate(tgt, prompts, proposer=proposer, **kw)  # warm-up, as above
        spec = generate(tgt, prompts, proposer=proposer, **kw)
        result[stage] = {
            "tau": spec.stats["tau"], "commit_hist": spec.stats["commit_hist"],
            "tokens_per_s": spec.stats["tokens_per_s"],
            "match_plain": sum(a == b for a, b in zip(spec.tokens, plain.tokens)),
        }
    (out / "eval" / "metrics.json").write_text(json.dumps(result, indent=2))
    release(tgt)
    return result


def release(tgt: Target) -> None:
    """Drop the engine's KV pool (most of the GPU's memory) before the next stage."""
    if tgt.runtime is not None:
        tgt.runtime.pool.close()
        tgt.runtime = None
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
