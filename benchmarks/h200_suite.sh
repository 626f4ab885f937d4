#!/usr/bin/env bash
# The H200 runbook: every GPU measurement of the workbench in four parts, each one `device run`
# of under 10 minutes, run back to back on one warm machine (artifacts/ persists between them).
#
#   bash benchmarks/h200_suite.sh PART OUT [micro]
#
# PART: world    the toy data (tokenizer and target come from experiments/zoo, whose stage
#                keys the recipe accepts), batch-1 AR at prompt 512 (issue 3's shape),
#                serve-bench at c = 1 and 32 with compiled prefill, the toy sweep with the
#                zoo's drafter (the c = 16 stall of 2026-11-29c) (~8 min)
#       drafters both main DFlash drafters in parallel (8 minutes of training), eval, zoo
#                export (~9.5 min; needs world)
#       train    ablations, DSpark study and self-spec fine-tune at once (threads capped per
#                process: nine trainers share 16 cores), then the acceptance tables and
#                studies (ablations, block size, latency) (~9 min; needs drafters)
#       timing   calibration of qwen3-8b, the simulator validation runs, the full serve-bench
#                sweep (Qwen3-8B shapes and the toy pair, sync vs overlap) (~9 min)
# world, drafters and train need about 26 minutes of H200 time with the machine's start; timing
# is for a session with time left (the committed tables are from 2026-11-29c).
# OUT: where results go ($OUT on the device machine); they come back as a few .tar chunks
# (the device returns at most 8 files). `micro` runs every command at CPU-test scale, to check
# the runbook itself on a machine without a GPU.
#
# Back on the CPU machine: bash benchmarks/h200_suite.sh post DEST DIR... unpacks every part's
# chunks found in the DIRs (the device's files_at folders) into DEST (e.g.
# benchmarks/h200-<date>), copies the zoo to experiments/zoo, installs the calibration tables,
# and writes the validation, Spec V2 and self-spec reports.
set -u
if [ "$1" = post ]; then
  dest=$2
  shift 2
  mkdir -p "$dest"
  for part in world drafters train timing; do
    chunks=$(find "$@" -maxdepth 1 -name "$part.tgz.*" | sort)
    [ -n "$chunks" ] && cat $chunks | tar xzf - -C "$dest" --transform "s,^r/,$part/,"
  done
  rmdir "$dest/r" 2>/dev/null
  [ -d "$dest/drafters/zoo" ] && rm -rf experiments/zoo && cp -r "$dest/drafters/zoo" \
    experiments/zoo && rm -rf "$dest/drafters/zoo"
  find "$dest" -name "*.safetensors" -delete
  ls "$dest"/timing/calibration/*.json >/dev/null 2>&1 && python -m workbench calibrate \
    install "$dest"/timing/calibration/*.json hardware=h200
  [ -f "$dest/timing/validation/validation-qwen3-8b.json" ] && python -m workbench validate \
    report "$dest/timing/validation/validation-qwen3-8b.json"
  if [ -f "$dest/timing/serve/serve_bench.json" ]; then
    python -m experiments.spec_v2 --measured "$dest/timing/serve/serve_bench.json"
    python -m experiments.spec_v2 --measured "$dest/timing/serve/serve_bench.json" \
      --cost-model calibrated --calibration qwen3-8b=h200/qwen3-8b,toy=h200/toy \
      --out experiments/spec_v2/calibrated
    python -m experiments.spec_v2_host --measured "$dest/timing/serve/serve_bench.json"
  fi
  [ -f "$dest/train/selfspec/metrics.json" ] && python -m experiments.selfspec_whatif \
    --toy-metrics "$dest/train/selfspec/metrics.json"
  exit 0
fi
part=$1
out=$2
micro=${3:-}
A=artifacts/toy
R=$out/r
mkdir -p "$R"
export PYTHONUNBUFFERED=1

if [ -n "$micro" ]; then
  WORLD=(--micro)
  DRAFT=(--micro)
  ABL=(--micro --budget-minutes 2)
  DSPARK=(--max-minutes 0.05 --dflash-minutes 0.05 --prompts 2 --max-new 12)
  SELFSPEC=(--minutes 0.05 --batch 4 --seq-len 48 --eval-prompts 2 --eval-max-new 12
            --prompt-len 8 24 --max-files 40)
  ACC=(num_prompts=2 max_new_tokens=12 max_files=40 "prompt_len=[8,24]")
  CAL=(model=toy --quick --device cpu)
  VAL=(model=toy --device cpu --concurrency 1,2 --blocks 4 --repeats 1 --prompt 16
       --new-tokens 8)
  SERVE=(--target random:tiny --device cpu --concurrency 1,2 --max-new-tokens 8
         --prompt-len 16)
  TOY=(--device cpu --concurrency 1,2 --max-new-tokens 8 --prompt-len 16)
  SERVE_ALL=("${SERVE[@]}")
else
  WORLD=(--size small --budget-minutes 5)  # tokenizer, target, data: the drafters do not fit
  DRAFT=(--size small --budget-minutes 10.5)  # a gate: drafters 8.5 planned, eval 1.5 (6 s measured)
  ABL=(--budget-minutes 3.4)
  DSPARK=(--max-minutes 2.5 --dflash-minutes 1.5)
  SELFSPEC=(--minutes 2.5)
  ACC=()
  CAL=(model=qwen3-8b --budget-s 150)
  VAL=(model=qwen3-8b --new-tokens 96)
  SERVE=(--concurrency 1,32)
  TOY=()
  SERVE_ALL=()
fi

run() {  # run NAME SECONDS CMD...: log to $R/NAME.log, never stop the suite
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$R/$name.log" 2>&1
  echo "== $name rc $? ($(tail -n 1 "$R/$name.log" | cut -c1-160))"
}

case $part in
  world)
    if [ -z "$micro" ]; then  # the committed tokenizer and target: their stage keys match
      mkdir -p $A && cp -rn experiments/zoo/tokenizer experiments/zoo/target $A/
    fi
    OMP_NUM_THREADS=8 run recipe 300 python -m reference.toy.recipe --out $A "${WORLD[@]}"
    if [ -z "$micro" ]; then
      # issue 3's shape: batch-1 AR, prompt 512, 256 new tokens
      run serve_bs1 90 python -m workbench serve-bench --out "$R/serve_bs1" --concurrency 1 \
        --methods ar --prompt-len 512 --max-new-tokens 256
    fi
    WORKBENCH_COMPILED_PREFILL=1 run serve 110 python -m workbench serve-bench \
      --out "$R/serve_compiled_prefill" "${SERVE[@]}"
    run serve_toy 80 python -m workbench serve-bench --out "$R/serve_toy" --target \
      random:tiny --methods ar --toy experiments/zoo "${TOY[@]}"
    ;;
  drafters)
    OMP_NUM_THREADS=8 run recipe 580 python -m reference.toy.recipe --out $A --parallel \
      --zoo "$R/zoo" "${DRAFT[@]}"
    ;;
  train)
    OMP_NUM_THREADS=1 run ablations 300 python -m reference.toy.ablations --out $A --parallel \
      "${ABL[@]}" &
    OMP_NUM_THREADS=4 run dspark 330 python -m reference.toy.dspark_study --artifacts $A \
      --out "$R/dspark" "${DSPARK[@]}" &
    OMP_NUM_THREADS=4 run selfspec 300 python -m reference.toy.train_selfspec --recipe $A \
      --out "$R/selfspec" "${SELFSPEC[@]}" &
    wait
    rm -f "$R"/selfspec/model/*.safetensors "$R"/dspark/*/model.safetensors
    run acceptance 100 python -m experiments.acceptance artifacts=$A "hydra.run.dir=$R/acc" \
      "${ACC[@]}"
    for study in ablations block_size latency; do
      run "acc_$study" 80 python -m experiments.acceptance artifacts=$A study=$study \
        "hydra.run.dir=$R/acc_$study" "${ACC[@]}"
    done
    ;;
  timing)
    run calibrate 185 python -m workbench calibrate hardware=h200 --out "$R/calibration" \
      "${CAL[@]}"
    run validate 120 python -m workbench validate run --out "$R/validation" "${VAL[@]}"
    toy=()
    [ -f $A/dflash-b16/config.json ] && toy=(--toy $A)
    run serve 230 python -m workbench serve-bench --out "$R/serve" "${toy[@]}" "${SERVE_ALL[@]}"
    ;;
  *)
    echo "unknown part $part (world, drafters, train, timing)" >&2
    exit 2
    ;;
esac
(cd "$out" && tar czf - r | split -b 15m - "$part.tgz." && rm -rf r)
ls -la "$out"
