#!/usr/bin/env bash
# Tensor parallelism of the reference engine on a 4xH200 host, in one call of under 9 min:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-03-tensor-parallel/run.sh OUT
#   bash benchmarks/reference/2026-12-03-tensor-parallel/run.sh OUT --device cpu  # smoke
# For TP 1, 2 and 4 (those the host has GPUs for): workbench/bench/tp.py on Qwen3-8B-shaped
# random bf16 weights, batch 1..32, prompt 256, 128 new tokens: AR, and DFlash (a drafter of
# z-lab Qwen3-8B-DFlash-b16 shapes at the oracle's tau 6.4, B = 16) with the drafter sharded
# and replicated, tok/s and the all-reduce ms per step and round. TP 1 runs as one process,
# the others under torchrun (NCCL). Then workbench/bench/tp_report.py writes summary.md
# (scaling over TP 1, DFlash's speedup next to SGLang PR #16818's, the issue's targets).
# OUT/results.tgz holds every JSON and log; OUT/summary.md the summary. `--device cpu`:
# gloo, tiny shapes, TP 1 and 2 (the script's own smoke run). TPS="2 4": those TP sizes only
# (each takes at most 150 s).
set -u
dest=$1
device=cuda
if [ "${2:-}" = --device ]; then device=${3:-cuda}; fi
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
if [ "$device" = cpu ]; then
  args=(--device cpu --preset tiny --batch-sizes 1,2 --prompt-len 8 --new-tokens 8
        --block-size 8 --collective-reps 3)
  sizes="1 2"
  limit=120
else
  args=(--batch-sizes 1,2,4,8,16,32 --prompt-len 256 --new-tokens 128)
  gpus=$(nvidia-smi -L | wc -l)
  sizes=""
  for tp in ${TPS:-1 2 4}; do
    if [ "$tp" -le "$gpus" ]; then sizes="$sizes $tp"; else echo "TP $tp: only $gpus GPUs"; fi
  done
  limit=150
fi
port=29611
for tp in $sizes; do
  if [ "$tp" = 1 ]; then
    step tp1 "$limit" python -m workbench.bench.tp --tp 1 "${args[@]}" --out "$out/tp1.json"
  else
    step "tp$tp" "$limit" torchrun --nproc-per-node "$tp" --master-port "$port" \
      -m workbench.bench.tp --tp "$tp" "${args[@]}" --out "$out/tp$tp.json"
    port=$((port + 1))
  fi
done
step summary 60 python -m workbench.bench.tp_report "$out"
cp "$out/summary.md" "$dest/summary.md"
cat "$dest/summary.md"
