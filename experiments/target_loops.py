"""`python -m experiments.target_loops --targets A B ... --out DIR`: how much toy targets
loop at T = 0, side by side on the same prompts.

Each target (an HF folder: the zoo's, or a recipe's `target` stage) decodes the first
`--num-prompts` prompts of the committed validation set (toy/eval_sets.py) greedily, up to
`--max-new-tokens` tokens or `<|endoftext|>`, `--batch-size` requests at a time. Reported
per target: its validation loss (its metrics.json), the 4-gram repetition of the outputs
(`repetition_rate`: repeated 4-grams over all 4-grams, pooled), the per-output repetition's
mean with 2 SE over outputs, the fraction of outputs below LOW_REPETITION, the repetition
by output position (`window_repetition`) and the mean output length; then, per target after
the first, the paired difference of per-output repetition (that target minus the first,
same prompts) with 2 SE. Writes results.json (stamped) and results.md.

    python -m experiments.target_loops --targets experiments/zoo/target \
        artifacts/dedup/target --out D                                # GPU, bf16
    python -m experiments.target_loops --targets experiments/zoo/target --num-prompts 8 \
        --max-new-tokens 32 --device cpu --out D                      # CPU, fp32, ~1 min
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from common.stamps import command_line, stamp
from experiments.acceptance_stats import LOW_REPETITION, POSITION_WINDOWS, repetition_rate

ZOO_TOKENIZER = Path(__file__).resolve().parent / "zoo" / "tokenizer" / "tokenizer.json"


def tokenizer_of(target_dir: Path) -> Path:
    """The target's own tokenizer.json, else its recipe's (../tokenizer), else the zoo's."""
    for path in (target_dir / "tokenizer.json", target_dir.parent / "tokenizer" /
                 "tokenizer.json"):
        if path.is_file():
            return path
    return ZOO_TOKENIZER


def decode(target_dir: Path, num_prompts: int, max_new_tokens: int, device: str,
           batch_size: int) -> list[list[int]]:
    """Greedy outputs (num_prompts, len_i <= max_new_tokens) of the target on the first
    num_prompts committed validation prompts, as `generate` returns them (a final stop
    token included, as experiments/acceptance.py counts). bf16 on cuda, fp32 on the CPU."""
    import torch

    from reference.generate import generate
    from reference.loaders import load_target
    from toy.eval_sets import committed_prompts
    from toy.stages import release
    from toy.tokenizer import EOT, load_tokenizer

    tok_path = tokenizer_of(target_dir)
    eot = load_tokenizer(tok_path).token_to_id(EOT)
    prompts = committed_prompts("validation", num_prompts, tok_path)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    target = load_target(target_dir, device=device, dtype=dtype)
    outputs = []
    for b0 in range(0, len(prompts), batch_size):
        batch = generate(target, prompts[b0 : b0 + batch_size], max_new_tokens=max_new_tokens,
                         stop_token_ids=(eot,))
        outputs += batch.tokens
        print(f"{target_dir}: {len(outputs)}/{len(prompts)} outputs, batch repetition "
              f"{repetition_rate(batch.tokens):.3f}", flush=True)
    release(target)
    return outputs


def window_repetition(outputs: list[list[int]], lo: int, hi: int, n: int = 4
                      ) -> tuple[float, int]:
    """(fraction, count) of the n-grams starting at output positions lo <= i < hi that equal
    an n-gram starting earlier anywhere in the same output (position 0: the first new token);
    nan with none."""
    grams = repeats = 0
    for tokens in outputs:
        seen = {tuple(tokens[i : i + n]) for i in range(min(lo, len(tokens) - n + 1))}
        for i in range(lo, min(hi, len(tokens) - n + 1)):
            gram = tuple(tokens[i : i + n])
            repeats += gram in seen
            grams += 1
            seen.add(gram)
    return (repeats / grams if grams else math.nan), grams


def mean_and_se(xs: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 with fewer than two values)."""
    m = len(xs)
    mean = sum(xs) / m
    var = sum((x - mean) ** 2 for x in xs) / (m - 1) if m > 1 else 0.0
    return mean, math.sqrt(var / m)


def loop_stats(outputs: list[list[int]]) -> dict:
    """The looping of one target's outputs; per-output repetition is `repetition_rate` of
    the output alone (0 when it is shorter than 4 tokens, as in acceptance's strata)."""
    per_output = [repetition_rate([t]) for t in outputs]
    mean, se = mean_and_se(per_output)
    windows = [{"window": [lo, hi], "repetition": r, "grams": g}
               for lo, hi in POSITION_WINDOWS for r, g in [window_repetition(outputs, lo, hi)]]
    return {"outputs": len(outputs), "repetition": repetition_rate(outputs),
            "per_output_mean": mean, "per_output_2se": 2 * se,
            "low_repetition_frac": sum(r < LOW_REPETITION for r in per_output) / len(outputs),
            "windows": windows, "mean_length": sum(map(len, outputs)) / len(outputs),
            "per_output": per_output}


def measure(targets: list[Path], num_prompts: int, max_new_tokens: int, device: str,
            batch_size: int) -> tuple[dict, list[list[list[int]]]]:
    """results.json's body (without the stamp) and each target's outputs."""
    rows, outputs = [], []
    for target_dir in targets:
        outputs.append(decode(target_dir, num_prompts, max_new_tokens, device, batch_size))
        metrics = target_dir / "metrics.json"
        val_loss = json.loads(metrics.read_text()).get("val_loss") if metrics.is_file() \
            else None
        rows.append({"target": str(target_dir), "val_loss": val_loss,
                     **loop_stats(outputs[-1])})
    paired = []
    for row in rows[1:]:
        diff, se = mean_and_se([b - a for a, b in zip(rows[0]["per_output"],
                                                      row["per_output"])])
        paired.append({"target": row["target"], "minus": rows[0]["target"],
                       "diff": diff, "diff_2se": 2 * se})
    return {"rows": rows, "paired": paired}, outputs


def markdown(body: dict, args: dict) -> str:
    (lo0, hi0), (lo1, hi1) = POSITION_WINDOWS
    lines = [f"# Target looping at T = 0 ({args['num_prompts']} validation prompts, "
             f"<= {args['max_new_tokens']} new tokens, {args['device']})", "",
             f"| target | val loss | 4-gram repetition | per output (2 SE) | "
             f"below {LOW_REPETITION} | positions [{lo0}, {hi0}) | [{lo1}, {hi1}) | "
             f"mean length |", "|" + " --- |" * 8]
    for r in body["rows"]:
        val = "-" if r["val_loss"] is None else f"{r['val_loss']:.3f}"
        w0, w1 = (w["repetition"] for w in r["windows"])
        lines.append(f"| {r['target']} | {val} | {r['repetition']:.3f} | "
                     f"{r['per_output_mean']:.3f} ± {r['per_output_2se']:.3f} | "
                     f"{r['low_repetition_frac']:.3f} | {w0:.3f} | {w1:.3f} | "
                     f"{r['mean_length']:.1f} |")
    for p in body["paired"]:
        lines += ["", f"Paired per-output repetition, {p['target']} minus {p['minus']}: "
                      f"{p['diff']:+.3f} ± {p['diff_2se']:.3f} (2 SE over outputs)."]
    lines += ["", "Windows: 4-grams starting at those output positions that repeat a 4-gram "
                  "starting earlier anywhere in the same output."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", type=Path, nargs="+", required=True)
    p.add_argument("--num-prompts", type=int, default=512)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    body, _ = measure(args.targets, args.num_prompts, args.max_new_tokens, args.device,
                      args.batch_size)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    config["targets"] = [str(t) for t in args.targets]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(
        {**stamp(command=command_line(), args=config), **body}, indent=1))
    text = markdown(body, config)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
