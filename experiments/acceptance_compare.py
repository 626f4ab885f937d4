"""`python -m experiments.acceptance_compare A B [--out F] [--strata C ...]`: two acceptance
runs, paired.

A and B are run folders of `python -m experiments.acceptance` on the same prompts (same
split, num_prompts, prompt_len and seed), e.g. the base and the small pair (runbook part
base-eval). For every (drafter, test B, split, T) measured in both, the table gives tau of
each, the difference A - B and twice its paired standard error: request i committed x_i
tokens in n_i rounds in each run, and with e_i the residuals of `tau_residuals`,
var(tau_A - tau_B) = m / (m - 1) * sum_i (e_Ai - e_Bi)^2. The pairing removes what the
prompts share (a prompt that loops is easy for both pairs), which the two runs'
unpaired standard errors count twice. tau is the mean commit length per round, pooled over
rounds. Also each run's mean output repetition; the same per stratum of output repetition
(fraction of 4-grams repeating an earlier 4-gram of the output, the larger of A's and B's;
--strata cuts, by default the headline's low-repetition threshold 0.3: loops are easy to
draft, and two targets can loop at different rates); and per window of the
output position where a round starts ([0, 64), [64, 256)), when both runs' requests.csv
have it. Prints the markdown table; with --out F writes it to F and a forest plot of the
differences to F's .png sibling.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from experiments.acceptance_stats import LOW_REPETITION, POSITION_WINDOWS, paired_difference

KEY = ("drafter", "test_B", "split", "T")


def read_requests(folder: Path) -> dict[tuple, list[dict]]:
    """requests.csv of a run folder grouped by KEY, each group in request order."""
    path = folder / "requests.csv"
    if not folder.is_dir():
        raise SystemExit(f"acceptance_compare: no run folder {folder}")
    if not path.is_file():
        raise SystemExit(f"acceptance_compare: {path} not found (runs before requests.csv "
                         f"was written cannot be paired)")
    groups: dict[tuple, list[dict]] = {}
    with path.open() as f:
        for r in csv.DictReader(f):
            groups.setdefault(tuple(r[k] for k in KEY), []).append(r)
    return {k: sorted(v, key=lambda r: int(r["request"])) for k, v in groups.items()}


def compare(a: Path, b: Path, strata: tuple[float, ...] = ()) -> list[dict]:
    """One row per KEY measured in both runs, on requests whose prompt lengths agree
    (stratum "all"). With `strata` (cut points in (0, 1)), also one row per stratum of the
    requests' output repetition, the larger of the two runs' (stratum "[lo, hi)"):
    exploratory, since repetition is an outcome of each pair's target. When both runs
    recorded them, also one row per output-position window (stratum "pos [lo, hi)"): the
    rounds whose first token falls in it, every request paired (requests counts those
    with such a round in either run)."""
    ra, rb = read_requests(a), read_requests(b)
    edges = [0.0, *strata, float("inf")]
    rows = []
    for key in sorted(set(ra) & set(rb)):
        qa, qb = ra[key], rb[key]
        if [q["prompt_len"] for q in qa] != [q["prompt_len"] for q in qb]:
            raise SystemExit(f"acceptance_compare: {key} was measured on other prompts in "
                             f"{a} and {b} (split, num_prompts, prompt_len and seed must match)")
        rep = [max(float(x["repetition"]), float(y["repetition"])) for x, y in zip(qa, qb)]
        everyone = range(len(qa))
        groups = {"all": (everyone, "committed", "rounds", len(qa))}
        for lo, hi in zip(edges[:-1], edges[1:]) if strata else ():
            label = f"[{lo:g}, {hi:g})" if hi < 1 else f"[{lo:g}, 1]"
            idx = [i for i, r in enumerate(rep) if lo <= r < hi]
            groups[label] = (idx, "committed", "rounds", len(idx))
        for lo, hi in POSITION_WINDOWS:
            n = f"rounds_pos{lo}_{hi}"
            if n in qa[0] and n in qb[0]:
                used = sum(1 for x, y in zip(qa, qb) if int(x[n]) + int(y[n]) > 0)
                groups[f"pos [{lo}, {hi})"] = (everyone, f"committed_pos{lo}_{hi}", n, used)
        for stratum, (idx, x, n, used) in groups.items():
            if used < 2 and stratum != "all":  # a stratum of one has no spread
                continue
            tau_a, tau_b, se = paired_difference(
                [(int(qa[i][x]), int(qa[i][n])) for i in idx],
                [(int(qb[i][x]), int(qb[i][n])) for i in idx])
            rows.append({**dict(zip(KEY, key)), "stratum": stratum, "requests": used,
                         "tau_A": tau_a, "tau_B": tau_b, "diff": tau_a - tau_b,
                         "two_se": 2 * se,
                         "repetition_A": sum(float(qa[i]["repetition"]) for i in idx)
                         / len(idx),
                         "repetition_B": sum(float(qb[i]["repetition"]) for i in idx)
                         / len(idx)})
    return rows


def verdict(row: dict) -> str:
    if abs(row["diff"]) <= row["two_se"]:
        return "within noise"
    return "A higher" if row["diff"] > 0 else "B higher"


def markdown(rows: list[dict], a: Path, b: Path) -> str:
    lines = [f"A = {a}, B = {b}; tau = mean commit length per round (pooled over rounds); "
             "A - B with twice its paired standard error\n",
             "| drafter | test_B | split | T | repetition stratum | requests | tau A | tau B | "
             "A - B | 2 SE | repetition A / B | verdict |", "|" + " --- |" * 12]
    for r in rows:
        lines.append(f"| {r['drafter']} | {r['test_B']} | {r['split']} | {r['T']} | "
                     f"{r['stratum']} | {r['requests']} | {r['tau_A']:.3f} | "
                     f"{r['tau_B']:.3f} | {r['diff']:+.3f} | {r['two_se']:.3f} | "
                     f"{r['repetition_A']:.2f} / {r['repetition_B']:.2f} | {verdict(r)} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], a: Path, b: Path, out: Path) -> None:
    """A forest plot: A - B per row with its 2 SE bar, zero marked (a bar that crosses it
    is within noise)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.4))
    y = list(range(len(rows)))[::-1]
    for r, yi in zip(rows, y):
        color = "tab:gray" if verdict(r) == "within noise" else "tab:blue"
        ax.errorbar(r["diff"], yi, xerr=r["two_se"], fmt="o", color=color, capsize=3)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(y, [f"{r['drafter']} B={r['test_B']} {r['split']} T={r['T']}"
                      + (f" rep {r['stratum']}" if r["stratum"] != "all" else "") for r in rows])
    ax.set_xlabel(f"tau(A) - tau(B), ± 2 paired SE\nA = {a.name}, B = {b.name}")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path, help="run folder A (e.g. the base pair's)")
    ap.add_argument("b", type=Path, help="run folder B (e.g. the small pair's)")
    ap.add_argument("--out", type=Path, default=None,
                    help="write the table here, and its forest plot next to it (.png)")
    ap.add_argument("--strata", type=float, nargs="*", default=(LOW_REPETITION,),
                    help="also per stratum of output repetition, cut at these values "
                         "(default: the headline's low-repetition threshold; none: overall "
                         "only)")
    args = ap.parse_args()
    rows = compare(args.a, args.b, tuple(args.strata))
    report = markdown(rows, args.a, args.b)
    if args.out is not None:
        args.out.write_text(report)
        plot(rows, args.a, args.b, args.out.with_suffix(".png"))
    print(report)


if __name__ == "__main__":
    main()
