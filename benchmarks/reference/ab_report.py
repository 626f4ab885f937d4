"""Ratios after / before of `workbench.bench` runs written by ab_bench.sh (stdlib only).

    python benchmarks/reference/ab_report.py DIR     # DIR/before_<r>.json, DIR/after_<r>.json

Per batch size: each side's tok/s (AR sync, AR with lookahead, DFlash at the oracle's
acceptance) as the median over rounds, the ratio after / before, the spread of the ratios
over rounds, and whether both sides produced the same tokens (the first 32 AR tokens of
request 0, and DFlash lossless on both).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

KEYS = (("ar_tok_s", "AR sync"), ("ar_lookahead_tok_s", "AR lookahead"),
        ("dflash_tok_s", "DFlash"))


def load(folder: Path, side: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob(f"{side}_*.json"))]


def report(folder: Path) -> str:
    before, after = load(folder, "before"), load(folder, "after")
    lines = ["| bs | metric | before (median) | after (median) | after / before | per round |",
             "| --: | --- | --: | --: | --: | --- |"]
    same = []
    for i, row in enumerate(before[0]["rows"]):
        bs = row["bs"] if "block" not in row else f"{row['bs']} (B = {row['block']})"
        for key, label in KEYS:
            b = [run["rows"][i][key] for run in before]
            a = [run["rows"][i][key] for run in after]
            ratios = [x / y for x, y in zip(a, b)]
            mb, ma = statistics.median(b), statistics.median(a)
            lines.append(f"| {bs} | {label} | {mb:.1f} | {ma:.1f} | {ma / mb:.3f} | "
                         + ", ".join(f"{r:.3f}" for r in ratios) + " |")
        same.append(all(run["rows"][i]["ar_tokens_head"] == row["ar_tokens_head"]
                        and run["rows"][i]["lossless"] for run in before + after))
    lines.append("")
    lines.append(f"same tokens on both sides, every round and batch size: {all(same)}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
