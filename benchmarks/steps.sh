#!/usr/bin/env bash
# The step runner of the GPU run scripts under benchmarks/, sourced after `set -u` and
# `dest=OUT` (the folder that receives results.tgz). It makes the scratch folder $out, where
# the steps write, and defines
#   step NAME SECONDS CMD...   run CMD into $out/NAME.log under a time limit, then re-pack
#                              every output so far into $dest/results.tgz
# so a run cut short by the machine's limit still returns what it finished.
out=$(mktemp -d)
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $?"
  tar czf "$dest/results.tgz" -C "$out" .
}
