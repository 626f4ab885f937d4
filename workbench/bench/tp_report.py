"""`python -m workbench.bench.tp_report DIR`: summary.md of the TP bench's runs in DIR
(tp<N>.json from workbench/bench/tp.py), against SGLang's published TP scaling.

Tables: AR and DFlash tok/s by TP and batch size with the scaling over TP = 1; DFlash's
speedup over AR at each TP next to SGLang PR #16818's (Qwen3-8B with the z-lab b16
drafter, GSM8K, greedy: 3.67x at TP 1 c = 1 to 1.66x at c = 32, 2.33x to 1.49x at TP 8,
accept length 6.3-6.4 at every TP; docs/sglang.md section 8 has the TP 1 row, the TP 8
endpoints are the PR's tables); the all-reduce share of a step or round; and the issue's
targets at TP 2, batch 1 (AR >= 1.6x TP 1, DFlash >= 1.4x, all-reduce <= 15% of a round).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# SGLang PR #16818: DFlash speedup over its baseline by concurrency (c 1, 2, 4, 8, 16, 32)
SGLANG_SPEEDUP = {1: (3.67, 3.42, 3.15, 2.79, 2.17, 1.66), 8: (2.33, None, None, None, None,
                                                               1.49)}
SGLANG_CONCURRENCY = (1, 2, 4, 8, 16, 32)
TARGETS = {"ar_scaling": 1.6, "dflash_scaling": 1.4, "allreduce_frac": 0.15}


def load(folder: Path) -> dict[int, list[dict]]:
    """{tp: rows} of every tp<N>.json in `folder` (a run cut short: the rows it saved)."""
    runs = {}
    for path in sorted(folder.glob("tp*.json")):
        data = json.loads(path.read_text())
        runs[int(data["args"]["tp"])] = data.get("rows", [])
    return runs


def _best(rows: list[dict], bs: int) -> dict | None:
    """The row of batch bs with the fastest DFlash (over the drafter placements)."""
    at = [r for r in rows if r["bs"] == bs]
    return max(at, key=lambda r: r["dflash_tok_s"]) if at else None


def _sglang(tp: int, bs: int) -> str:
    if tp not in SGLANG_SPEEDUP or bs not in SGLANG_CONCURRENCY:
        return "-"
    value = SGLANG_SPEEDUP[tp][SGLANG_CONCURRENCY.index(bs)]
    return "-" if value is None else f"{value:.2f}x"


def summary(runs: dict[int, list[dict]]) -> str:
    """The report's markdown."""
    if not runs:
        return "# Tensor parallelism\n\nNo run produced rows.\n"
    tps = sorted(runs)
    sizes = sorted({r["bs"] for rows in runs.values() for r in rows})
    base = runs.get(1, [])
    out = ["# Tensor parallelism: AR and DFlash by TP and batch size", "",
           "DFlash at the oracle's acceptance (the round costs of a drafter of z-lab "
           "Qwen3-8B-DFlash-b16 shapes); `xN`: over TP 1 at the same batch. `AR%`: "
           "all-reduce time (timed alone at the round's message sizes) over the step or "
           "round. SGLang: PR #16818's DFlash speedup over its own baseline (TP 1, TP 8).", "",
           "| TP | bs | drafter | AR tok/s | xTP1 | AR AR% | DFlash tok/s | xTP1 | tau | "
           "DF AR% | speedup | SGLang | lossless |",
           "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for tp in tps:
        for bs in sizes:
            ref = _best(base, bs)
            for r in (r for r in runs[tp] if r["bs"] == bs):
                ar_x = f"{r['ar_tok_s'] / ref['ar_tok_s']:.2f}" if ref else "-"
                df_x = f"{r['dflash_tok_s'] / ref['dflash_tok_s']:.2f}" if ref else "-"
                out.append(
                    f"| {tp} | {bs} | {r['drafter']} | {r['ar_tok_s']:.1f} | {ar_x} | "
                    f"{100 * r['ar_allreduce_frac']:.1f}% | {r['dflash_tok_s']:.1f} | {df_x} | "
                    f"{r['tau']:.2f} | {100 * r['dflash_allreduce_frac']:.1f}% | "
                    f"{r['speedup']:.2f}x | {_sglang(tp, bs)} | {r['lossless']} |")
    out += ["", "## Targets (TP 2, batch 1)", ""] + _targets(runs)
    return "\n".join(out) + "\n"


def _targets(runs: dict[int, list[dict]]) -> list[str]:
    one, two = _best(runs.get(1, []), 1), _best(runs.get(2, []), 1)
    if one is None or two is None:
        return ["- not measured (no TP 1 or TP 2 row at batch 1)"]
    ar, df = two["ar_tok_s"] / one["ar_tok_s"], two["dflash_tok_s"] / one["dflash_tok_s"]
    frac = two["dflash_allreduce_frac"]
    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    return [f"- AR: {ar:.2f}x TP 1 (target >= {TARGETS['ar_scaling']}x): "
            f"{verdict(ar >= TARGETS['ar_scaling'])}",
            f"- DFlash ({two['drafter']} drafter): {df:.2f}x TP 1 (target >= "
            f"{TARGETS['dflash_scaling']}x): {verdict(df >= TARGETS['dflash_scaling'])}",
            f"- all-reduce: {100 * frac:.1f}% of that DFlash round (target <= "
            f"{100 * TARGETS['allreduce_frac']:.0f}%): "
            f"{verdict(frac <= TARGETS['allreduce_frac'])}"]


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--out", type=Path, default=None, help="default: DIR/summary.md")
    args = p.parse_args(argv)
    text = summary(load(args.folder))
    (args.out or args.folder / "summary.md").write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
