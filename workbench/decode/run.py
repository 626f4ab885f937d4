"""The decode loop of `python -m workbench decode`: batches, per-request lines, pooled report.

`decode_batches` builds the method for each batch of `batch_size` prompts (the oracle drafts
that batch's greedy continuations), decodes it with `reference.generate`, prints every
completion under a line of its new tokens, rounds and tau (mean commit length), and ends
with the statistics pooled over all batches: tokens/s (tokens after each request's first,
over the decode seconds), tau, the commit-length histogram and the per-round time split.
"""

from __future__ import annotations

import contextlib
from collections import Counter

from reference.generate import generate
from reference.methods import BuildContext, MethodSpec, build
from workbench.decode.prompts import Prompt, UsageError, cut_at_stop

PHASES = ("draft", "verify", "accept", "inject", "host")


@contextlib.contextmanager
def blame(argument: str):
    """Turn a loader's or factory's error into a UsageError, prefixed by `argument` (empty:
    the loaders' own messages, which name the file)."""
    try:
        yield
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"{argument}: {e}" if argument else str(e)) from e


def check_lengths(
    prompts: list[Prompt], ids: list[list[int]], max_new_tokens: int, block: int, max_position: int
) -> None:
    """Every position a request can reach (its last drafted block of `block` tokens
    included) lies inside the target's RoPE table of `max_position` rows."""
    for p, x in zip(prompts, ids):
        if len(x) + max_new_tokens + block - 1 > max_position:
            raise UsageError(
                f"{p.where}: {len(x)} prompt tokens + --max-new-tokens "
                f"{max_new_tokens} + block size {block} - 1 exceed the target's "
                f"max_position_embeddings {max_position}"
            )


def completion_text(tokenizer, new_ids: list[int], stops: list[str]) -> str:
    """The text of a completion's ids (special tokens kept), cut before the first stop."""
    return cut_at_stop(tokenizer.decode(new_ids, skip_special_tokens=False), stops)


def decode_batches(
    args,
    target,
    prompts: list[Prompt],
    ids: list[list[int]],
    spec: MethodSpec,
    tokenizer,
    stop_ids: list[int],
    engine_options: dict,
) -> None:
    """Decode every prompt, `args.batch_size` at a time, printing as described above."""
    print(f"method: {spec}")
    sampling = dict(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        stop_token_ids=stop_ids,
        seed=args.seed,
    )
    runs, speculative = [], False
    for start in range(0, len(ids), args.batch_size):
        batch = ids[start : start + args.batch_size]
        with blame("--drafter" if args.drafter else "--method"):
            proposer = build(spec, target, BuildContext(batch, args.max_new_tokens))
        speculative = proposer is not None
        check_lengths(
            prompts[start:],
            batch,
            args.max_new_tokens,
            getattr(proposer, "block_size", 1),
            target.config.max_position,
        )
        if start == 0:  # warm-up: CUDA graphs, compilation
            generate(
                target,
                batch,
                proposer=proposer,
                max_new_tokens=min(8, args.max_new_tokens),
                **sampling,
            )
        out = generate(
            target, batch, proposer=proposer, max_new_tokens=args.max_new_tokens, **sampling
        )
        for k, (new, commits) in enumerate(zip(out.tokens, out.accept_lengths)):
            _print_request(start + k, prompts, ids, new, commits, speculative, tokenizer, args)
        runs.append(out.stats)
    report(pool(runs, len(ids)), speculative, engine_options)


def _print_request(
    i: int, prompts, ids, new: list[int], commits: list[int], speculative: bool, tokenizer, args
) -> None:
    line = (
        f"[{i + 1}/{len(ids)}] {prompts[i].where}: {len(ids[i])} prompt tokens, "
        f"{len(new)} new tokens, {len(commits)} rounds"
    )
    if speculative:
        line += f", tau {sum(commits) / max(len(commits), 1):.3f}"
    print(line)
    if tokenizer is not None:
        print(completion_text(tokenizer, new, args.stop))
    if tokenizer is None or args.show_ids:
        print("ids: " + " ".join(map(str, new)))
    print()


def pool(runs: list[dict], n_prompts: int) -> dict:
    """The `generate` stats of several runs as one: counts and seconds summed, tokens/s over
    the summed decode seconds, tau from the summed commit-length histogram."""
    hist = Counter()
    for s in runs:
        hist.update(s["commit_hist"])
    total = {
        k: sum(s[k] for s in runs)
        for k in ("rounds", "prefill_s", "decode_s", "new_tokens", *(f"{p}_s" for p in PHASES))
    }
    return {
        **total,
        "commit_hist": dict(sorted(hist.items())),
        "tokens_per_s": (total["new_tokens"] - n_prompts) / max(total["decode_s"], 1e-9),
        "tau": sum(n * c for n, c in hist.items()) / max(sum(hist.values()), 1),
    }


def report(s: dict, speculative: bool, engine_options: dict) -> None:
    """Print pooled stats `s` (`pool`): tokens/s, tau and histogram, per-round time split."""
    rounds = max(s["rounds"], 1)
    print("engine options: " + ", ".join(f"{k}={v}" for k, v in engine_options.items()))
    print(
        f"decode: {s['tokens_per_s']:.1f} tok/s, {s['new_tokens']} new tokens, "
        f"{s['rounds']} rounds, prefill {s['prefill_s'] * 1e3:.1f} ms"
    )
    if speculative:
        print(f"tau (mean commit length): {s['tau']:.3f}")
        total = sum(s["commit_hist"].values())
        for n, count in s["commit_hist"].items():
            print(f"  commit {n:>3}: {count:>6} {'#' * round(50 * count / total)}")
    split = {k: s[f"{k}_s"] * 1e3 / rounds for k in PHASES}
    print("per round (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in split.items()))
