#!/usr/bin/env bash
# The H200 runbook: every GPU measurement of the workbench in four parts, each one `device run`
# of under 10 minutes, run back to back on one warm machine (artifacts/ persists between them).
#
#   bash benchmarks/h200_suite.sh PART OUT [micro]
#
# PART: world    toy tokenizer, target and data (recipe up to the data stage); calibration of
#                qwen3-8b; the simulator validation runs (~8 min)
#       drafters both main DFlash drafters in parallel (8 minutes of training), eval, zoo
#                export, the acceptance tables (~10 min; needs world)
#       train    ablations, DSpark study and self-spec fine-tune at once (threads capped per
#                process: nine trainers share 16 cores), then the acceptance studies
#                (ablations, block size, latency) (~8 min; needs drafters)
#       serve    the batch-1 engine ablation (fused q/k, Triton GEMV), serve-bench at c = 1
#                and 32 with compiled prefill, batch-1 AR at prompt 512 (~6 min)
# The four parts need about 31 minutes of H200 time with the machine's start: run them in
# this order (each later part is worth less than the one before if time runs short).
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
  for part in world drafters train serve; do
    chunks=$(find "$@" -maxdepth 1 -name "$part.tgz.*" | sort)
    [ -n "$chunks" ] && cat $chunks | tar xzf - -C "$dest" --transform "s,^r/,$part/,"
  done
  rmdir "$dest/r" 2>/dev/null
  [ -d "$dest/drafters/zoo" ] && rm -rf experiments/zoo && cp -r "$dest/drafters/zoo" \
    experiments/zoo && rm -rf "$dest/drafters/zoo"
  find "$dest" -name "*.safetensors" -delete
  ls "$dest"/world/calibration/*.json >/dev/null 2>&1 && python -m workbench calibrate \
    install "$dest"/world/calibration/*.json hardware=h200
  [ -f "$dest/world/validation/validation-qwen3-8b.json" ] && python -m workbench validate \
    report "$dest/world/validation/validation-qwen3-8b.json"
  if [ -f "$dest/serve/serve/serve_bench.json" ]; then
    python -m experiments.spec_v2 --measured "$dest/serve/serve/serve_bench.json"
    python -m experiments.spec_v2 --measured "$dest/serve/serve/serve_bench.json" \
      --cost-model calibrated --calibration qwen3-8b=h200/qwen3-8b,toy=h200/toy \
      --out experiments/spec_v2/calibrated
    python -m experiments.spec_v2_host --measured "$dest/serve/serve/serve_bench.json"
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
  BENCH=()
  SERVE=(--target random:tiny --device cpu --concurrency 1,2 --max-new-tokens 8
         --prompt-len 16)
else
  WORLD=(--size small --budget-minutes 5)  # tokenizer, target, data: the drafters do not fit
  DRAFT=(--size small --budget-minutes 9.5)
  ABL=(--budget-minutes 3.4)
  DSPARK=(--max-minutes 2.5 --dflash-minutes 1.5)
  SELFSPEC=(--minutes 2.5)
  ACC=()
  CAL=(model=qwen3-8b --budget-s 150)
  VAL=(model=qwen3-8b --new-tokens 96)
  BENCH=(--ablate --variants "all off,+fused qk,qk+gemv")
  SERVE=(--concurrency 1,32)
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
    OMP_NUM_THREADS=8 run recipe 280 python -m reference.toy.recipe --out $A "${WORLD[@]}"
    run calibrate 185 python -m workbench calibrate hardware=h200 --out "$R/calibration" \
      "${CAL[@]}"
    run validate 120 python -m workbench validate run --out "$R/validation" "${VAL[@]}"
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
  serve)
    if [ -z "$micro" ]; then
      run bench 200 python -m reference.bench --out "$R/engine_ablation.json" "${BENCH[@]}"
    fi
    WORKBENCH_COMPILED_PREFILL=1 run serve 110 python -m workbench serve-bench \
      --out "$R/serve_compiled_prefill" "${SERVE[@]}"
    if [ -z "$micro" ]; then  # issue 3's shape: batch-1 AR, prompt 512, 256 new tokens
      run serve_bs1 90 python -m workbench serve-bench --out "$R/serve_bs1" --concurrency 1 \
        --methods ar --prompt-len 512 --max-new-tokens 256
    fi
    ;;
  *)
    echo "unknown part $part (world, drafters, train, serve)" >&2
    exit 2
    ;;
esac
(cd "$out" && tar czf - r | split -b 15m - "$part.tgz." && rm -rf r)
ls -la "$out"
