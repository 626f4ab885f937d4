"""`python -m experiments.whatifs.toy_context [--out DIR] [--windows N]`: the toy world's
acceptance by context length, on the CPU, with the committed zoo pair (experiments/zoo).

Paired nested contexts: N cut points are drawn in test-split files of this interpreter's
stdlib (never trained on) that hold at least max(--contexts) + --new-tokens tokens; at each
cut point, every context length L of --contexts is the L tokens just before the cut, so all
lengths continue the same text and differ only in how much of it precedes. The zoo target
continues each context greedily (T = 0) for --new-tokens tokens with the B = 16 drafter, and
tau (committed tokens over rounds) is read per context bucket, with 2 standard errors over
the N cut points and the paired difference to the shortest bucket. The zoo target was
trained on 512-token windows and its drafter on prompts of 64-256 tokens plus 256 generated
ones, so contexts past 512 are outside both training lengths.

Writes toy_context.json (per bucket: tau, 2 SE, paired difference, repetition; the command,
the Python and torch versions) into --out (default experiments/whatif_context_decay/).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from experiments.acceptance_stats import repetition_rate

ZOO = Path("experiments/zoo")
CONTEXTS = (64, 128, 256, 512, 1024, 2048)


def cut_windows(
    files: list[list[int]], n: int, contexts: tuple[int, ...], new: int, seed: int
) -> list[dict[int, list[int]]]:
    """n cut points, each as {L: the L tokens before the cut} (files drawn by length)."""
    longest = max(contexts)
    pool = [f for f in files if len(f) >= longest + new]
    if not pool:
        raise ValueError(f"no file holds {longest + new} tokens; lower --contexts")
    rng = np.random.default_rng(seed)
    sizes = np.array([len(f) for f in pool], dtype=np.float64)
    picks = rng.choice(len(pool), size=n, p=sizes / sizes.sum())
    out = []
    for i in picks:
        cut = int(rng.integers(longest, len(pool[i]) - new + 1))
        out.append({L: pool[i][cut - L : cut] for L in contexts})
    return out


def bucket_rows(
    commits: dict[int, list[list[int]]], tokens: dict[int, list[list[int]]]
) -> list[dict]:
    """Per context length: tau (ratio estimator over cut points) with 2 SE, and the paired
    difference to the shortest length with 2 SE (same cut points)."""
    base_len = min(commits)
    base = np.array([[sum(a), len(a)] for a in commits[base_len]], dtype=np.float64)
    rows = []
    for L in sorted(commits):
        x = np.array([[sum(a), len(a)] for a in commits[L]], dtype=np.float64)
        tau, se = _ratio(x)
        tau0 = base[:, 0].sum() / base[:, 1].sum()
        # Paired difference: per cut point, linearised contributions of both ratios.
        d = (x[:, 0] - tau * x[:, 1]) / x[:, 1].mean() - (base[:, 0] - tau0 * base[:, 1]) / base[
            :, 1
        ].mean()
        rows.append(
            {
                "context_tokens": L,
                "tau": tau,
                "tau_2se": 2 * se,
                "diff_vs_shortest": tau - tau0,
                "diff_2se": 2 * float(d.std(ddof=1) / np.sqrt(len(d))),
                "rounds": int(x[:, 1].sum()),
                "windows": len(x),
                "repetition": repetition_rate(tokens[L]),
            }
        )
    return rows


def _ratio(x: np.ndarray) -> tuple[float, float]:
    """sum(committed) / sum(rounds) and its standard error (delta method)."""
    tau = x[:, 0].sum() / x[:, 1].sum()
    resid = (x[:, 0] - tau * x[:, 1]) / x[:, 1].mean()
    return float(tau), float(resid.std(ddof=1) / np.sqrt(len(x)))


def measure(
    zoo: Path, n: int, contexts: tuple[int, ...], new: int, seed: int, batch: int
) -> list[dict]:
    """Decode every cut point at every context length; the rows of `bucket_rows`."""
    import torch

    from reference.loaders import load_target
    from toy.gen_data import split_files
    from toy.tokenizer import EOT, load_tokenizer
    from toy.variants import load_variant

    torch.manual_seed(seed)
    target = load_target(zoo / "target", device="cpu", dtype=torch.float32)
    tok = load_tokenizer(zoo / "tokenizer" / "tokenizer.json")
    proposer = load_variant(zoo / "dflash-b16", target)
    windows = cut_windows(
        split_files(tok, "test", None, max(contexts) + new), n, contexts, new, seed
    )
    commits, tokens = {}, {}
    t0 = time.time()
    print(f"{len(windows)} windows drawn", flush=True)
    from reference.generate import generate

    for L in contexts:
        prompts = [w[L] for w in windows]
        outs = [
            generate(
                target,
                prompts[i : i + batch],
                proposer=proposer,
                max_new_tokens=new,
                stop_token_ids=(tok.token_to_id(EOT),),
                seed=seed,
            )
            for i in range(0, len(prompts), batch)
        ]
        commits[L] = [a for o in outs for a in o.accept_lengths]
        tokens[L] = [t for o in outs for t in o.tokens]
        tau = sum(map(sum, commits[L])) / sum(map(len, commits[L]))
        print(f"context {L}: tau {tau:.2f} ({time.time() - t0:.0f} s)", flush=True)
    return bucket_rows(commits, tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("experiments/whatif_context_decay"))
    ap.add_argument("--zoo", type=Path, default=ZOO)
    ap.add_argument("--windows", type=int, default=32, help="cut points N")
    ap.add_argument("--contexts", type=int, nargs="+", default=list(CONTEXTS))
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    t0 = time.time()
    rows = measure(
        args.zoo, args.windows, tuple(args.contexts), args.new_tokens, args.seed, args.batch
    )
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": "python -m experiments.whatifs.toy_context " + " ".join(sys.argv[1:]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": "cpu",
        "drafter": "experiments/zoo/dflash-b16",
        "block_size": 16,
        "temperature": 0.0,
        "new_tokens": args.new_tokens,
        "wall_s": time.time() - t0,
        "buckets": rows,
    }
    (args.out / "toy_context.json").write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        print(
            f"{r['context_tokens']:>5}: tau {r['tau']:.2f} +- {r['tau_2se']:.2f}, "
            f"vs shortest {r['diff_vs_shortest']:+.2f} +- {r['diff_2se']:.2f}, "
            f"repetition {r['repetition']:.2f}"
        )


if __name__ == "__main__":
    main()
