#!/usr/bin/env bash
# The H200 runbook: every GPU measurement of the workbench in parts of under 10 minutes each,
# run one after another on the same machine (artifacts/ persists between them).
#
#   bash benchmarks/h200_suite.sh PART OUT [micro]
#
# PART: world    the toy data (tokenizer and target come from experiments/zoo, whose stage
#                keys the recipe accepts) and a probe of a drafter's training step eager vs
#                compiled (60 s each, alone) (~5.5 min)
#       engine   the engine bench at batch 1 (prompt 512, 256 new tokens;
#                AR with and without lookahead, DFlash with the oracle, the decode step's top
#                kernels) twice: GEMV tuned in CUDA graphs (the default), then by do_bench
#                (--no-gemv-tune-graph); the attention and GEMV kernels' rows (split
#                count and keys per loop step at batch 1, the attention's early loads at
#                the decode, verify and tree shapes; the tuned GEMV against cuBLAS in
#                graph replays that stream W past L2); each device phase of a bs-1 round
#                replayed alone (workbench.bench.phases: time, weight floor, top kernels), with
#                the defaults and with --no-pdl (~7.5 min)
#       drafters both main DFlash drafters in parallel (8 minutes of training), eval, zoo
#                export (~9.5 min; needs world)
#       ablations the four ablations that decide tables 9, 10 and 13 (full, no features,
#                input fusion, uniform blocks), 8 minutes each in parallel, and their
#                acceptance (~9.5 min; after world: its data and the probe, which decides
#                --compile or --no-compile; on a cold machine it makes the data itself and
#                trains 5.5 minutes). Training parts write a profile of steps
#                10-14 of every trainer into profiles/ (toy/step_cost.py)
#       train    the seven 3-minute ablations beside the DSpark study (18-27 GB each), then
#                the acceptance tables and studies (main, ablations, block size, latency)
#                (~9 min; needs drafters or the zoo's drafters copied to artifacts/toy)
#       depth    table 9 in the paper's setting on a cold machine: the data, full and
#                fusion drafters of 5 layers at B = 8 (--layers 5 --block 8, 4.5 minutes
#                each in parallel) and their acceptance (~9.5 min)
#       base     the base pair (does a 30-60M target carry more future information than
#                the small one), stage 1: the recipe's target (dropout 0.3, the default for
#                base, chosen by the sweep of benchmarks/toy/2026-11-29-base-pair-dropout/)
#                and its data, the tokenizer copied from the zoo (~5 min: target 107 s,
#                data 155 s)
#       base-drafters stage 2 on the same machine: both drafters in parallel (8 min)
#                and the recipe's eval (64 prompts) (~9 min)
#       base-eval the base and small (zoo) pairs on the same 1024 prompts per split, T = 0
#                and 1, and their paired difference (experiments/acceptance_compare.py), also
#                by repetition stratum; the base pair's block-size study (table 8)
#                (~3 min; after base-drafters)
#       loops    does a small target trained on a de-duplicated split loop less at T = 0?
#                The train files of highest token 4-gram repetition, a quarter of the tokens,
#                dropped (the cut R from this machine's corpus, toy.train_target
#                --repetition-cut, saved in artifacts/dedup/max_repetition: images differ,
#                one H200 image's stdlib has no test/ package); the recipe's target stage,
#                then its looping and validation loss against the zoo target's
#                (experiments/target_loops.py, 1024 validation prompts) (~3 min). Run the
#                next three parts only if its repetition falls by more than the spread of
#                two runs on the same data (0.04: benchmarks/toy/2026-12-01-dedup-target/)
#       loops-data its drafter's training data, the recipe's data stage (~4 min)
#       loops-drafter its B = 16 drafter (8 min; alone, as the zoo's were trained: trainers
#                beside others get fewer steps in their wall budgets)
#       loops-eval its pair against the zoo pair's B = 16 drafter on 1024 prompts per split,
#                paired, also by repetition stratum (~3 min)
#       tree     tree verification (budgets 16-128) against the chain for the zoo and base
#                pairs, 1024 committed test prompts, T = 0 and 1 (~2 min; after
#                base-drafters; TREE_PAIRS=base for the base pair alone)
#       commit-ab DFlash with and without EngineOptions.fused_commit (acceptance and the
#                draft-KV injection inside the verify graph) at bs 1, alternated twice:
#                the round split and tok/s side by side (~5 min)
#       tree-engine what a tree round costs against a chain round on Qwen3-8B shapes (bs 1,
#                4, 16, 64; budgets 16-128): forward and round times, ops per round, the
#                break-even budget, the top kernels of AR, chain and N = 64 tree verify (~4 min)
#       tree-tiles the tree verify's attention with taller query tiles: the kernel's tile
#                and split sweep at bs 1, T = 64 (kernels/paged_attention/bench.py
#                tree_rows), then bs-1 tree rounds (N = 64) with each tall tile against
#                the 64-row tiles and the chain (experiments/tree_engine.py --tall-tiles)
#                (~4 min)
#       selfspec the self-spec fine-tune of the toy target, alone (beside the train part's
#                trainers it runs out of GPU memory); the toy data first when
#                artifacts/toy lacks it (from the zoo's tokenizer and target) (~6 min)
#       timing   calibration of qwen3-8b (a 260 s budget: its compiled shapes alone took
#                146 s on 2026-12-02), the simulator validation runs (~7 min)
#       serve    the full serve-bench sweep (Qwen3-8B shapes and the toy pair, sync vs
#                overlap) (~4 min)
#       tests    the GPU test suite (benchmarks/gpu_suite.sh: tests/kernels and tests/reference
#                under HYPOTHESIS_PROFILE=gpu, timed), first on every machine that measures,
#                its output committed beside the part's data (~3 min)
# Run a part when its inputs change (results: benchmarks/README.md lists every run). Run the
# parts one at a time: beside another part a trainer gets fewer steps in its wall budget and
# an evaluation can pass its time limit (benchmarks/toy/2026-12-01-base-pair-contended/).
# OUT: where results go; each part packs them as a few .tgz chunks of at most 15 MB.
# `micro` runs every command at CPU-test scale, to check the runbook itself on a machine
# without a GPU.
#
# Back on the CPU machine: bash benchmarks/h200_suite.sh post DEST DIR... unpacks every part's
# chunks found in the DIRs into DEST/<part>/, copies the zoo to experiments/zoo, installs the
# calibration tables, and writes the validation, Spec V2 and self-spec reports. Each part's
# folder then goes to benchmarks/<topic>/<date>-<slug>/ with a README (command, GPU,
# versions, headline) and a row in benchmarks/README.md.
set -u
if [ "$1" = post ]; then
  dest=$2
  shift 2
  mkdir -p "$dest"
  for part in world engine drafters ablations depth base base-drafters base-eval loops \
      loops-data loops-drafter loops-eval tree tree-engine tree-tiles commit-ab train selfspec \
      timing serve \
      tests; do
    chunks=$(find "$@" -maxdepth 1 -name "$part.tgz.*" | sort)
    [ -n "$chunks" ] && cat $chunks | tar xzf - -C "$dest" --transform "s,^r/,$part/,"
  done
  rmdir "$dest/r" 2>/dev/null
  if [ -d "$dest/drafters/zoo" ]; then  # the new zoo, keeping its README
    find experiments/zoo -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
    cp -r "$dest/drafters/zoo/." experiments/zoo/ && rm -rf "$dest/drafters/zoo"
  fi
  find "$dest" -name "*.safetensors" -delete
  ls "$dest"/timing/calibration/*.json >/dev/null 2>&1 && python -m workbench calibrate \
    install "$dest"/timing/calibration/*.json hardware=h200
  [ -f "$dest/timing/validation/validation-qwen3-8b.json" ] && python -m workbench validate \
    report "$dest/timing/validation/validation-qwen3-8b.json"
  if [ -f "$dest/serve/serve/serve_bench.json" ]; then
    python -m experiments.spec_v2 --measured "$dest/serve/serve/serve_bench.json"
    python -m experiments.spec_v2 --measured "$dest/serve/serve/serve_bench.json" \
      --cost-model calibrated --calibration qwen3-8b=h200/qwen3-8b,toy=h200/toy \
      --out experiments/spec_v2/calibrated
    python -m experiments.spec_v2_host --measured "$dest/serve/serve/serve_bench.json"
  fi
  [ -f "$dest/selfspec/selfspec/metrics.json" ] && python -m experiments.selfspec_whatif \
    --toy-metrics "$dest/selfspec/selfspec/metrics.json"
  exit 0
fi
part=$1
out=$2
micro=${3:-}
A=artifacts/toy
B=artifacts/base
V=artifacts/dedup
DROP_FRAC=0.25  # the loops part drops the most repetitive train files holding this share
R=$out/r
mkdir -p "$R"
export PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # parallel trainers share one GPU

if [ -n "$micro" ]; then
  WORLD=(--micro)
  DRAFT=(--micro)
  ABL=(--micro --budget-minutes 2)
  DSPARK=(--max-minutes 0.05 --dflash-minutes 0.05 --prompts 2 --max-new 12)
  SELFSPEC=(--minutes 0.05 --batch 4 --seq-len 48 --eval-prompts 2 --eval-max-new 12
            --prompt-len 8 24 --max-files 40)
  ACC=(num_prompts=2 max_new_tokens=12 max_files=40 "prompt_len=[8,24]" prompts=corpus)
  CAL=(model=toy --quick --device cpu)
  VAL=(model=toy --device cpu --concurrency 1,2 --blocks 4 --repeats 1 --prompt 16
       --new-tokens 8)
  SERVE_ALL=(--target random:tiny --device cpu --concurrency 1,2 --max-new-tokens 8
             --prompt-len 16)
  BENCH=(--device cpu --preset tiny --batch-sizes 1,2 --prompt-len 16 --new-tokens 8
         --hf-new-tokens 0)
  LONG=(--micro)
  LONG_MIN=0.05
  LONG_COLD_MIN=0.04
  DEPTH=2
  DEPTH_MIN=0.05
  BASE1=(--micro)
  BASE2=(--micro)
  PAIRED=("${ACC[@]}")
  PROBE=(--block 16 --layers 1 --anchors 8 --batch 6 --steps 24 --lr 3e-3)
  LOOPS1=(--micro)
  LOOP_N=(--num-prompts 4 --max-new-tokens 12 --device cpu)
  TREE=(--num-prompts 2 --max-new-tokens 12 --budgets 4,8 --device cpu)
  TREE_ENGINE=(--device cpu --preset tiny --batch-sizes 1 --budgets 16 --reps 1 --context 64)
  COMMIT_AB=(--device cpu --preset tiny --batch-sizes 1 --prompt-len 16 --new-tokens 8
             --hf-new-tokens 0)
  PHASES=(--device cpu --preset tiny --prompt-len 16 --new-tokens 24 --reps 2 --profile-reps 1)
else
  WORLD=(--size small --budget-minutes 5)  # tokenizer, target, data: the drafters do not fit
  DRAFT=(--size small --budget-minutes 10.5)  # a gate: drafters 8.5 planned, eval 1.5 (6 s measured)
  ABL=(--budget-minutes 3.4)
  DSPARK=(--max-minutes 2.5 --dflash-minutes 1.5)
  SELFSPEC=(--minutes 2.5)
  ACC=()
  CAL=(model=qwen3-8b --budget-s 260)
  VAL=(model=qwen3-8b --new-tokens 96)
  BENCH=(--batch-sizes 1 --profile)  # with the transformers peer in the same run (bs 4-64:
  # benchmarks/reference/2026-11-29-engine-paged-attention/)
  LONG=()
  LONG_MIN=8  # after world on the same machine
  LONG_COLD_MIN=5.5  # the data stage first (~2.5 min)
  DEPTH=5  # the paper's drafters (table 9: Qwen3-4B, 5 layers)
  DEPTH_MIN=4.5  # data 127 s, training 4.5 min, acceptance: 591 s with a bench
  BASE1=(--size base --budget-minutes 9)  # target and data: the drafters do not fit
  BASE2=(--size base --budget-minutes 10.5)
  PAIRED=(num_prompts=1024 batch_size=1024)  # 2 paired SE 0.12-0.18 at T = 0 (256 prompts:
  # 0.25-0.38); one batch: 127 s for both pairs, batch 64 would take ~10 min
  PROBE=(--block 16 --batch 128 --steps 6000 --max-minutes 1.0)
  SERVE_ALL=()
  LOOPS1=(--size small)  # wall caps: target 4, data 3.5, drafter 8 minutes (target 67 s)
  LOOP_N=(--num-prompts 1024 --max-new-tokens 256 --device cuda --batch-size 1024)
  TREE=(--num-prompts 1024 --max-new-tokens 128 --budgets 16,32,64,128 --device cuda)
  TREE_ENGINE=()
  COMMIT_AB=(--batch-sizes 1 --hf-new-tokens 0)
  PHASES=()
fi

run() {  # run NAME SECONDS CMD...: log to $R/NAME.log, never stop the suite
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$R/$name.log" 2>&1
  echo "== $name rc $? ($(tail -n 1 "$R/$name.log" | cut -c1-160))"
}

toy_data() {  # toy_data NAME: artifacts/toy's data stage from the zoo's tokenizer and
  # target (their stage keys are the recipe's, so it skips them; micro: makes its own)
  [ -z "$micro" ] && mkdir -p $A && cp -rn experiments/zoo/tokenizer experiments/zoo/target $A/
  OMP_NUM_THREADS=8 run "$1" 300 python -m toy.recipe --out $A "${WORLD[@]}"
}

case $part in
  world)
    toy_data recipe
    compile_flags=(--no-compile --compile)
    for c in 0 1; do  # a drafter's step eager vs compiled, alone (ablations picks one)
      run probe$c 180 python -m toy.train_dflash --target $A/target --out $A/probe$c \
        --data $A/data/train.safetensors "${PROBE[@]}" "${compile_flags[$c]}" \
        --profile $R/profiles
      cp $A/probe$c/metrics.json "$R/probe$c.json"
    done
    ;;
  engine)
    run bench 200 python -m workbench.bench --out "$R/bench.json" "${BENCH[@]}"
    run bench_do_bench_tuned 200 python -m workbench.bench \
      --out "$R/bench_do_bench_tuned.json" "${BENCH[@]}" --no-gemv-tune-graph
    [ -z "$micro" ] && run kernels 150 python -m kernels.bench --ops paged_attention,gemv \
      --out "$R/kernels.json"
    run phases 150 python -m workbench.bench.phases --out "$R/phases.json" "${PHASES[@]}"
    run phases_nopdl 150 python -m workbench.bench.phases --out "$R/phases_nopdl.json" \
      "${PHASES[@]}" --no-pdl
    ;;
  drafters)
    OMP_NUM_THREADS=8 run recipe 580 python -m toy.recipe --out $A --parallel \
      --zoo "$R/zoo" --profile $R/profiles "${DRAFT[@]}"
    ;;
  ablations)
    minutes=$LONG_MIN
    if [ ! -f $A/data/train.safetensors ]; then  # a cold machine: world's data stage first
      toy_data recipe
      minutes=$LONG_COLD_MIN
    fi
    compile=  # the default (compiled on CUDA) unless world's probe says eager fits more
    [ -f $A/probe1/metrics.json ] && compile=$(python -m toy.step_cost --choose \
      $A/probe0 $A/probe1 --minutes "$minutes")
    compile_flag=()
    [ "$compile" = 1 ] && compile_flag=(--compile)
    [ "$compile" = 0 ] && compile_flag=(--no-compile)
    echo "== $minutes min, compile: ${compile_flag[*]:-default}" | tee "$R/compile.log"
    OMP_NUM_THREADS=2 run ablations 540 \
      python -m toy.ablations --out $A --parallel --minutes "$minutes" \
      --budget-minutes 9 --only full --only no-features --only fusion --only uniform \
      "${compile_flag[@]}" --profile $R/profiles "${LONG[@]}"
    run acc_ablations 80 python -m experiments.acceptance artifacts=$A study=ablations \
      "drafters=[ablations/full,ablations/no-features,ablations/fusion,ablations/uniform]" \
      "hydra.run.dir=$R/acc_ablations" "${ACC[@]}"
    ;;
  train)
    OMP_NUM_THREADS=1 run ablations 300 python -m toy.ablations --out $A --parallel \
      "${ABL[@]}" &
    OMP_NUM_THREADS=4 run dspark 330 python -m toy.dspark_study --artifacts $A \
      --out "$R/dspark" "${DSPARK[@]}" &
    wait
    rm -f "$R"/dspark/*/model.safetensors
    run acceptance 100 python -m experiments.acceptance artifacts=$A "hydra.run.dir=$R/acc" \
      "${ACC[@]}"
    for study in ablations block_size latency; do
      run "acc_$study" 80 python -m experiments.acceptance artifacts=$A study=$study \
        "hydra.run.dir=$R/acc_$study" "${ACC[@]}"
    done
    ;;
  depth)
    toy_data recipe
    OMP_NUM_THREADS=4 run ablations 340 \
      python -m toy.ablations --out $A --parallel --minutes "$DEPTH_MIN" \
      --layers "$DEPTH" --block 8 --only full --only fusion --profile $R/profiles "${LONG[@]}"
    run acc_depth 80 python -m experiments.acceptance artifacts=$A study=ablations \
      "drafters=[ablations/full-l$DEPTH-b8,ablations/fusion-l$DEPTH-b8]" \
      "hydra.run.dir=$R/acc_depth" "${ACC[@]}"
    ;;
  base)
    [ -z "$micro" ] && mkdir -p $B && cp -rn experiments/zoo/tokenizer $B/
    # the target's and the data's wall caps: 4 + 3.5 minutes (measured: 107 + 155 s)
    OMP_NUM_THREADS=8 run recipe 480 python -m toy.recipe --out $B "${BASE1[@]}"
    cp $B/target/stage.json "$R/target_stage.json"
    ;;
  base-drafters)
    OMP_NUM_THREADS=8 run recipe 580 python -m toy.recipe --out $B --parallel \
      "${BASE2[@]}"
    for s in data dflash-b16 dflash-b8 eval; do cp $B/$s/stage.json "$R/${s}_stage.json"; done
    ;;
  base-eval)
    [ -z "$micro" ] && mkdir -p $A && cp -rn experiments/zoo/. $A/  # the small pair
    for pair in base toy; do
      [ -f artifacts/$pair/dflash-b16/config.json ] && run "acc_$pair" 200 \
        python -m experiments.acceptance artifacts=artifacts/$pair \
        "hydra.run.dir=$R/acc_$pair" "${PAIRED[@]}"
    done
    run compare 60 python -m experiments.acceptance_compare "$R/acc_base" "$R/acc_toy" \
      --out "$R/compare.md"
    run compare_by_repetition 60 python -m experiments.acceptance_compare "$R/acc_base" \
      "$R/acc_toy" --strata 0.3 0.7 --out "$R/compare_by_repetition.md"
    run acc_base_block_size 150 python -m experiments.acceptance artifacts=$B \
      study=block_size "hydra.run.dir=$R/acc_base_block_size" "${ACC[@]}"  # table 8 (34 s)
    ;;
  loops)
    mkdir -p $V
    [ -z "$micro" ] && cp -rn experiments/zoo/tokenizer $V/
    tok=experiments/zoo/tokenizer/tokenizer.json
    [ -n "$micro" ] && tok=$V/tokenizer/tokenizer.json  # micro: the recipe's own, made first
    [ -n "$micro" ] && python -m toy.recipe --out $V --stage tokenizer "${LOOPS1[@]}" >/dev/null
    files=()
    [ -n "$micro" ] && files=(--max-files 40)
    python -m toy.train_target --repetition-cut $DROP_FRAC --tokenizer "$tok" "${files[@]}" \
      >$V/max_repetition
    echo "== max_repetition $(cat $V/max_repetition) (drop $DROP_FRAC of the train tokens)"
    cp $V/max_repetition "$R/"
    OMP_NUM_THREADS=8 run target 300 python -m toy.recipe --out $V --stage target \
      --target-max-repetition "$(cat $V/max_repetition)" "${LOOPS1[@]}"
    cp $V/target/stage.json "$R/target_stage.json"
    [ -z "$micro" ] && mkdir -p $A && cp -rn experiments/zoo/. $A/  # the zoo target
    run target_loops 200 python -m experiments.target_loops --targets $A/target $V/target \
      --out "$R/target_loops" "${LOOP_N[@]}"
    ;;
  loops-data)
    OMP_NUM_THREADS=8 run data 300 python -m toy.recipe --out $V --stage data \
      --target-max-repetition "$(cat $V/max_repetition)" "${LOOPS1[@]}"
    cp $V/data/stage.json "$R/data_stage.json"
    ;;
  loops-drafter)
    OMP_NUM_THREADS=8 run drafter 570 python -m toy.recipe --out $V --stage dflash-b16 \
      --target-max-repetition "$(cat $V/max_repetition)" "${LOOPS1[@]}"
    cp $V/dflash-b16/stage.json "$R/dflash-b16_stage.json"
    ;;
  loops-eval)
    [ -z "$micro" ] && mkdir -p $A && cp -rn experiments/zoo/. $A/  # the small pair
    run acc_dedup 200 python -m experiments.acceptance artifacts=$V "drafters=[dflash-b16]" \
      "hydra.run.dir=$R/acc_dedup" "${PAIRED[@]}"
    run acc_toy 200 python -m experiments.acceptance artifacts=$A "drafters=[dflash-b16]" \
      "hydra.run.dir=$R/acc_toy" "${PAIRED[@]}"
    run compare 60 python -m experiments.acceptance_compare "$R/acc_dedup" "$R/acc_toy" \
      --out "$R/compare.md"
    run compare_by_repetition 60 python -m experiments.acceptance_compare "$R/acc_dedup" \
      "$R/acc_toy" --strata 0.3 0.7 --out "$R/compare_by_repetition.md"
    ;;
  tree)
    [ -z "$micro" ] && mkdir -p $A && cp -rn experiments/zoo/. $A/
    for pair in ${TREE_PAIRS:-toy base}; do
      for t in 0 1; do
        [ -f artifacts/$pair/dflash-b16/config.json ] && run "tree_${pair}_t$t" 200 \
          python -m experiments.tree_budget --zoo artifacts/$pair --temperature $t \
          --out "$R/tree_${pair}_t$t" "${TREE[@]}"
      done
    done
    ;;
  commit-ab)
    for i in 1 2; do
      for side in unfused fused; do
        flag=()
        [ $side = fused ] && flag=(--fused-commit)
        run "bench_${side}_$i" 150 python -m workbench.bench --out "$R/bench_${side}_$i.json" \
          "${COMMIT_AB[@]}" "${flag[@]}"
      done
    done
    ;;
  tree-tiles)
    [ -z "$micro" ] && run tree_rows 150 python -c "from kernels.paged_attention.bench import \
tree_rows
for r in tree_rows(): print(f'{r.shape:<78} {r.kernel.p50:>8.2f} {r.oracle.p50:>8.2f} {r.met}')"
    run tree_engine_tiles 300 python -m experiments.tree_engine --batch-sizes 1 \
      --budgets 64 --tall-tiles 128x4,128x8,256x8 --out "$R/tree_engine_tiles.json" \
      "${TREE_ENGINE[@]}"
    ;;
  tree-engine)
    run tree_engine 400 python -m experiments.tree_engine --profile \
      --out "$R/tree_engine.json" "${TREE_ENGINE[@]}"
    ;;
  selfspec)
    [ -z "$micro" ] && [ ! -f $A/data/train.safetensors ] && toy_data data
    OMP_NUM_THREADS=8 run selfspec 300 python -m toy.train_selfspec --recipe $A \
      --out "$R/selfspec" "${SELFSPEC[@]}"
    rm -f "$R"/selfspec/model/*.safetensors "$R"/selfspec/model/tokenizer.json
    ;;
  timing)
    run calibrate 290 python -m workbench calibrate hardware=h200 --out "$R/calibration" \
      "${CAL[@]}"
    run validate 170 python -m workbench validate run --out "$R/validation" "${VAL[@]}"
    ;;
  serve)
    toy=()
    [ -f $A/dflash-b16/config.json ] && toy=(--toy $A)
    run serve 230 python -m workbench serve-bench --out "$R/serve" "${toy[@]}" "${SERVE_ALL[@]}"
    ;;
  tests)
    [ -z "$micro" ] && bash benchmarks/gpu_suite.sh suite "$R"
    ;;
  *)
    echo "unknown part $part (world, engine, drafters, ablations, depth, base, base-drafters," \
      "base-eval, loops, loops-data, loops-drafter, loops-eval, tree, tree-engine, commit-ab," \
      "train, selfspec, timing, serve, tests)" >&2
    exit 2
    ;;
esac
(cd "$out" && tar czf - r | split -b 15m - "$part.tgz." && rm -rf r)
ls -la "$out"
