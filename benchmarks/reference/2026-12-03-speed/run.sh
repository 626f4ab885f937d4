#!/usr/bin/env bash
# The speed issue's targets in one run on one H200 (under 8 minutes), from the repository root:
#   bash benchmarks/reference/2026-12-03-speed/run.sh OUT
# DEVICE=cpu runs every step on tiny shapes (the Triton kernels under the interpreter): a
# smoke run of the script. Steps (each writes OUT/NAME.json and NAME.log, then summary.md):
#   tree_kernel  the tree verify's attention alone: 16-row tiles against tall tiles
#                (EngineOptions.tall_tree) and a chain of the same token count, N 32, 64,
#                batch 1 and 4
#   bench        workbench.bench at bs 1 and 16: AR and DFlash (oracle, planned acceptance at
#                tau 6.5), sync and lookahead, tok/s at the requested tau, the outside clock
#   tree_tiles   experiments.tree_engine at bs 1 and 4, N = 64 against the chain
#   tree_tall    the same with --tall-tree
set -u
dest=$1
here=$(cd "$(dirname "$0")" && pwd)
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
if [ "${DEVICE:-cuda}" = cpu ]; then
  export TRITON_INTERPRET=1
  kernel=(--device cpu --budgets 5,9 --context 20 --width 40)
  bench=(--device cpu --preset tiny --batch-sizes 1,2 --prompt-len 16 --new-tokens 24)
  tree=(--device cpu --preset tiny --context 24 --reps 2 --pairs 2 --batch-sizes 1,2)
else
  kernel=(); bench=(--batch-sizes 1,16); tree=(--batch-sizes 1,4 --pairs 5)
fi
step tree_kernel 75 python -m kernels.paged_attention.tree_bench "${kernel[@]}" \
  --batch-sizes 1,4 --out "$out/tree_kernel.json"
step bench 180 python -m workbench.bench "${bench[@]}" --hf-new-tokens 0 --tau 6.5 \
  --out "$out/bench.json"
step tree_tiles 110 python -m experiments.tree_engine "${tree[@]}" --budgets 64 \
  --out "$out/tree_tiles.json"
step tree_tall 110 python -m experiments.tree_engine "${tree[@]}" --budgets 64 --tall-tree \
  --out "$out/tree_tall.json"
python "$here/summarize.py" "$out" > /dev/null
cp "$out"/*.json "$out"/*.log "$out/summary.md" "$dest"/ 2>/dev/null
tar czf "$dest/results.tgz" -C "$out" .
cat "$dest/summary.md"
