#!/usr/bin/env bash
# The bs-1 decode step with PDL launches that trigger their dependents before they wait and
# a GEMV that loads its first W chunk before it waits, against the tree before, on one H200:
#   git archive <before> reference kernels common | tar -x -C .bench_before
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-pdl-early-weights/run.sh OUT
# Each side: reference.bench --ablate with PDL off and on (the decode graph replayed, same
# tokens), interleaved before / after twice; then the GEMV and PDL GPU tests.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
variants=qk+gemv+defer+static,qk+gemv+defer+static+pdl
for r in 1 2; do
  step "before_$r" 150 bash -c "cd .bench_before && python -m reference.bench --ablate \
    --variants $variants --ablate-repeats 2 --out $out/before_$r.json"
  step "after_$r" 150 python -m reference.bench --ablate --variants "$variants" \
    --ablate-repeats 2 --out "$out/after_$r.json"
done
step tests 200 env HYPOTHESIS_PROFILE=gpu python -m pytest -q -n 8 -p no:cacheprovider \
  tests/kernels/test_gemv.py tests/kernels/test_gemv_split_k.py tests/kernels/test_pdl.py \
  tests/reference/test_triton_gemv.py tests/kernels/test_paged_attention.py
