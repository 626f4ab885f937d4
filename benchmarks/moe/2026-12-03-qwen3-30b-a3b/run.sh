#!/usr/bin/env bash
# Qwen3-30B-A3B shapes on one H200 (issue 46), from the repository root, under 7 minutes:
#   GIT_SHA=<commit> bash benchmarks/moe/2026-12-03-qwen3-30b-a3b/run.sh OUT
# 1. the MoE GPU tests; 2. the fused MoE kernel by tokens per expert (moe_kernel.json);
# 3. workbench.bench on random:qwen3-30b-a3b: AR and DFlash (B = 16, oracle tau 6.5) at
#    batch 1, 4, 16, 64 with the round split (bench.json); 4. workbench calibrate of the
#    preset (calibration/); 5. summarize.py: summary.md and qwen3-30b-a3b.json (the
#    calibration plus the expert-GEMM efficiency curve `moe_experts`).
# Layers run eagerly inside the CUDA graphs (--no-compile) in 3 and 4: compiling 48 layers'
# shapes alone took longer than this run's limit on the dense 8B. DEVICE=cpu runs every step
# on tiny shapes (random:tiny-moe, the interpreter): the script's smoke test.
set -u
dest=$1
here=benchmarks/moe/2026-12-03-qwen3-30b-a3b
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
if [ "${DEVICE:-cuda}" = cpu ]; then
  preset=tiny-moe; dev=(--device cpu); sizes=1,2; len=(--prompt-len 6 --new-tokens 8)
  block=4; tau=2.5; calib=(--quick --budget-s 30); tests=(-m "not gpu")
else
  preset=qwen3-30b-a3b; dev=(); sizes=1,4,16,64; len=(--prompt-len 256 --new-tokens 128)
  block=16; tau=6.5; calib=(--budget-s 80); tests=(-m gpu)
fi
HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu} step tests 90 python -m pytest -q "${tests[@]}" \
  tests/kernels/test_moe.py tests/reference/test_moe.py
mv "$out/tests.log" "$out/tests.full.log" && tail -n 5 "$out/tests.full.log" > "$out/tests.log"
step kernel 75 python "$here/moe_kernel.py" "${dev[@]}" --out "$out/moe_kernel.json"
step bench 135 python -m workbench.bench --preset "$preset" "${dev[@]}" --batch-sizes "$sizes" \
  "${len[@]}" --block-size "$block" --tau "$tau" --hf-new-tokens 0 --no-compile \
  --out "$out/bench.json"
step calibrate 110 python -m workbench calibrate "model=$preset" hardware=h200 "${dev[@]}" \
  "${calib[@]}" --no-compile --out "$out/calibration"
[ "$preset" = qwen3-30b-a3b ] || cp "$out/calibration/$preset.json" \
  "$out/calibration/qwen3-30b-a3b.json" 2>/dev/null
step summarize 30 python "$here/summarize.py" "$out" \
  --dense benchmarks/reference/2026-12-02-targets/bench.json
cp -r "$out"/. "$dest"/
cat "$dest/summary.md"
