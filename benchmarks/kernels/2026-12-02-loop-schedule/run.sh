#!/usr/bin/env bash
# Two kernel sweeps on one H200, from the repository root:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-loop-schedule/run.sh OUT
# The attention key loop's schedules on the engine's launch shapes
# (kernels.paged_attention.sweep), then the GEMV bench with the 32- and 64-row rows of a tree
# verify (kernels.bench --ops gemv). OUT/results.tgz holds every output so far, re-packed
# after each step.
set -u
dest=$1
out=$(mktemp -d)
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS CMD...: run CMD into NAME.log, then re-pack the results
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $?"
  tar czf "$dest/results.tgz" -C "$out" .
}
step sweep 300 python -m kernels.paged_attention.sweep --out "$out/sweep.json"
step gemv 200 python -m kernels.bench --ops gemv --out "$out/gemv.json"
