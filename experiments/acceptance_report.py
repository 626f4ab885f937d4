"""The reports of `python -m experiments.acceptance`: the loop-aware headline table, the
full table of results.md, the CSV writer and the survival / histogram plots.

The headline gives, per (drafter, test B, split, T), tau = mean commit length per round
(pooled over rounds) over all requests and over the low-repetition stratum, and tau by the
output position of a round's first token, each with twice its standard error over requests
and the counts behind it (experiments/acceptance_stats.py).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from experiments.acceptance_stats import POSITION_WINDOWS


def _window(lo: int, hi: int) -> str:
    return f"pos{lo}_{hi}"


def headline_columns(c_all: dict, low: dict, by_position: list[dict]) -> dict:
    """The headline's columns of one results.csv row: `acceptance_curves`' tau over all
    requests, `low_repetition_tau` and `position_tau` of the same requests."""
    cols = {"tau_low_rep": low["tau"], "tau_low_rep_se": low["tau_se"],
            "low_rep_requests": low["requests"]}
    for w in by_position:
        name = _window(*w["window"])
        cols.update({f"tau_{name}": w["tau"], f"tau_{name}_se": w["tau_se"],
                     f"rounds_{name}": w["rounds"]})
    return cols


def _tau(tau: float, se: float) -> str:
    return "-" if math.isnan(tau) else f"{tau:.2f} ± {2 * se:.2f}"


def headline_table(rows: list[dict], threshold: float) -> str:
    """The loop-aware headline of results.md: one line per row of results.csv."""
    windows = [_window(lo, hi) for lo, hi in POSITION_WINDOWS]
    lines = [
        "## Headline: tau overall and in the low-repetition stratum\n",
        "tau = mean commit length per round (tokens committed / rounds, pooled over the rounds "
        "of the requests counted), ± 2 SE (ratio estimator, the request as the unit). "
        f"Low repetition: requests whose output has fewer than {threshold:g} of its 4-grams "
        "repeating an earlier 4-gram of the same output (loops are easy to draft and inflate "
        "tau). By position: rounds whose first token is at output position "
        + " or ".join(f"[{lo}, {hi})" for lo, hi in POSITION_WINDOWS)
        + " (position 0 is the prefill's token).\n",
        "| drafter | test_B | split | T | requests | tau (all) | low-rep requests | "
        "tau (low-rep) | " + " | ".join(f"tau [{lo}, {hi}) (rounds)"
                                        for lo, hi in POSITION_WINDOWS) + " |",
        "|" + " --- |" * (8 + len(windows))]
    for r in rows:
        cells = [r["drafter"], r["test_B"], r["split"], r["T"], r["prompts"],
                 _tau(r["tau"], r["tau_se"]), r["low_rep_requests"],
                 _tau(r["tau_low_rep"], r["tau_low_rep_se"])]
        cells += [f"{_tau(r[f'tau_{w}'], r[f'tau_{w}_se'])} ({r[f'rounds_{w}']})"
                  for w in windows]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n\n"


def write_csv(path: Path, rows: list[dict]) -> None:
    """rows (dicts with the same keys, in order) as a CSV file with a header."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


EQUAL_PLAIN_NOTE = (
    "\nequal_plain: requests whose output equals plain decoding token for token (at T = 0 the "
    "same greedy function; in bf16 on the GPU a B-token verify and a 1-token decode sum in "
    "different orders, so a near-tied argmax can flip and the texts part; the CPU tests "
    "assert exact equality in fp32). At T = 1 both sample the same distribution with "
    "different draws.\n")


def markdown_table(rows: list[dict]) -> str:
    """Every measured column of results.csv but the headline's, one line per row."""
    cols = ("drafter", "train_B", "test_B", "split", "T", "tau", "tau_se", "full_block",
            "repetition", "equal_plain", "speedup", "draft_ms_per_round")
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows:
        cells = [f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        cells[cols.index("equal_plain")] = f"{r['equal_plain']}/{r['prompts']}"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_curves(curves: list[dict], out: Path) -> None:
    """survival.png and commit_hist.png: one panel per temperature, one line per drafter
    and test B (the test split when measured, else the first split)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    split = "test" if any(c["split"] == "test" for c in curves) else curves[0]["split"]
    temps = sorted({c["T"] for c in curves})
    groups: dict[tuple, list[dict]] = {}
    for c in curves:
        if c["split"] == split:
            groups.setdefault((c["T"], c["drafter"], c["test_B"]), []).append(c)
    for name, col, ylabel in (("survival", "survival", "S(k) = P(commit_len >= k)"),
                              ("commit_hist", "hist", "fraction of rounds")):
        fig, axes = plt.subplots(1, len(temps), figsize=(6 * len(temps), 4), squeeze=False,
                                 sharey=True)
        for ax, temp in zip(axes[0], temps):
            for (t, drafter, block), pts in groups.items():
                if t == temp:
                    ax.plot([p["k"] for p in pts], [p[col] for p in pts], marker="o", ms=3,
                            label=f"{drafter} B={block}")
            ax.set_xlabel("k (commit length)")
            ax.set_title(f"{name}, {split} split, T={temp}")
            ax.legend(fontsize=7)
        axes[0][0].set_ylabel(ylabel)
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=120)
        plt.close(fig)
