#!/usr/bin/env bash
# The one round pipeline (propose -> verify -> accept -> commit) against the engine before
# it (c2ea631), side by side on one H200, in one call of under 9 minutes:
#   mkdir .bench_before && git archive c2ea631 reference kernels common | tar -x -C .bench_before
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-03-one-round/run.sh OUT
# The machine gets a copy of the working tree without .git, so the before side is the
# untracked folder .bench_before (not ignored: it travels), made beforehand as above. Each
# side runs its own engine bench, `reference.bench` of c2ea631 and `workbench.bench` of this
# tree, with the same flags: batch 1 and 16, Qwen3-8B shapes, a drafter of z-lab's
# Qwen3-8B-DFlash-b16 shapes at the oracle's acceptance (tau 6.5, B = 16), prompt 512, 256
# new tokens; AR and DFlash, sync and lookahead rounds (the bench's defaults). A pair runs
# before then after; a second pair, after then before, runs when the first left room for it
# in 8.5 minutes. OUT/results.tgz holds every run's JSON and log and report.md: per batch
# size and metric the median tok/s of each side, after / before, and whether both sides
# produced the same tokens (the AR tokens, DFlash lossless, the same rounds and tau).
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
if [ ! -d .bench_before/reference ]; then
  echo "no .bench_before/reference: run 'mkdir .bench_before && git archive c2ea631" \
       "reference kernels common | tar -x -C .bench_before' in the repository first"
  exit 2
fi
# BENCH_EXTRA: more flags for both sides, after these (a CPU smoke run of the script:
# BENCH_EXTRA="--device cpu --preset tiny --batch-sizes 1,2 --prompt-len 6 --new-tokens 12
# --block-size 4 --tau 2.5")
# shellcheck disable=SC2206  # BENCH_EXTRA: words
args=(--batch-sizes 1,16 --hf-new-tokens 0 ${BENCH_EXTRA:-})
side() {  # SIDE ROUND
  if [ "$1" = before ]; then
    step "before_$2" 240 env -C .bench_before python -m reference.bench "${args[@]}" \
      --out "$out/before_$2.json"
  else
    step "after_$2" 240 python -m workbench.bench "${args[@]}" --out "$out/after_$2.json"
  fi
}
start=$(date +%s)
side before 1
side after 1
pair=$(( $(date +%s) - start ))
if [ $(( pair * 2 + 20 )) -lt 510 ]; then
  side after 2
  side before 2
fi
python3 - "$out" > "$out/report.md" <<'PY'
import json, statistics, sys
from pathlib import Path

folder = Path(sys.argv[1])
runs = {s: [json.loads(p.read_text()) for p in sorted(folder.glob(f"{s}_*.json"))]
        for s in ("before", "after")}
keys = (("ar_tok_s", "AR sync"), ("ar_lookahead_tok_s", "AR lookahead"),
        ("dflash_tok_s", "DFlash sync"), ("dflash_lookahead_tok_s", "DFlash lookahead"))
print(f"pairs: {len(runs['before'])} before, {len(runs['after'])} after\n")
print("| bs | metric | before | after | after / before | per run (after / before) |")
print("| --: | --- | --: | --: | --: | --- |")
same, within = [], []
for i, row in enumerate(runs["before"][0]["rows"]):
    for key, label in keys:
        b = [r["rows"][i][key] for r in runs["before"]]
        a = [r["rows"][i][key] for r in runs["after"]]
        ratio = statistics.median(a) / statistics.median(b)
        within.append(ratio >= 0.98)
        print(f"| {row['bs']} | {label} | {statistics.median(b):.1f} | "
              f"{statistics.median(a):.1f} | {ratio:.3f} | "
              + ", ".join(f"{x / y:.3f}" for x, y in zip(a, b)) + " |")
    for r in runs["before"] + runs["after"]:
        got = r["rows"][i]
        same.append(got["ar_tokens_head"] == row["ar_tokens_head"] and got["lossless"]
                    and got["ar_lookahead_same_tokens"] and got["dflash_lookahead_same_tokens"]
                    and (got["rounds"], got["tau"]) == (row["rounds"], row["tau"]))
print(f"\nsame tokens on both sides (AR tokens, DFlash lossless, lookahead = sync, the same "
      f"rounds and tau), every run and batch size: {all(same)}")
print(f"every metric within 2% of before (after / before >= 0.98): {all(within)}")
PY
cat "$out/report.md"
tar czf "$dest/results.tgz" -C "$out" .
