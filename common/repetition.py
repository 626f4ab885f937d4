"""Repetition of token sequences: the share of n-grams that repeat an earlier n-gram of the
same sequence. The loop measure of the acceptance reports (experiments/acceptance_stats.py)
and of the target's training filter (toy/train_target.py `drop_repetitive`)."""

from __future__ import annotations


def repetition_rate(outputs: list[list[int]], n: int = 4) -> float:
    """Fraction of the outputs' n-grams that already occurred earlier in the same output
    (pooled over outputs; 0 with no n-gram)."""
    seen_total = repeats = 0
    for tokens in outputs:
        seen = set()
        for i in range(len(tokens) - n + 1):
            gram = tuple(tokens[i : i + n])
            repeats += gram in seen
            seen.add(gram)
            seen_total += 1
    return repeats / max(seen_total, 1)
