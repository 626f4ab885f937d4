#!/usr/bin/env bash
# `python -m workbench.bench` of two versions of the engine side by side on one GPU,
# interleaved (before, after, before, after, ...) so drift hits both alike.
#
#   git archive <commit> reference kernels common workbench | tar -x -C DIR  # the version before
#   bash benchmarks/reference/ab_bench.sh DIR OUT [ROUNDS] [-- workbench.bench args]
#
# DIR holds the earlier version's packages; the working tree is the later one (DIR = . and
# AFTER_FLAGS="--gemv-glu ..." compare engine options of one tree: the after side appends
# AFTER_FLAGS to its workbench.bench arguments). Each side runs its own tree's bench
# (`reference.bench` in a tree from before workbench/bench/). Each run's JSON and log land
# in OUT/ab/, packed into OUT/ab.tgz (the device returns few files), and
# benchmarks/reference/ab_report.py prints the ratios (after / before) per batch size.
set -eu
before=$1; out=$2; rounds=${3:-2}
shift $(( $# < 3 ? $# : 3 )); [ "${1:-}" = "--" ] && shift
args=("$@"); [ ${#args[@]} -eq 0 ] && args=(--batch-sizes 1,16 --hf-new-tokens 0)
here=$(pwd); work="$out/ab"; mkdir -p "$work"
for r in $(seq "$rounds"); do
  for side in before after; do
    dir=$here; extra=${AFTER_FLAGS:-}; [ $side = before ] && { dir=$before; extra=; }
    start=$(date +%s)
    bench=workbench.bench; [ -d "$dir/workbench/bench" ] || bench=reference.bench
    # shellcheck disable=SC2086  # AFTER_FLAGS: words
    (cd "$dir" && python -m $bench "${args[@]}" $extra --out "$work/${side}_$r.json") \
      > "$work/${side}_$r.log" 2>&1 || { tail -20 "$work/${side}_$r.log"; exit 1; }
    echo "$side $r: $(( $(date +%s) - start )) s"
  done
done
python benchmarks/reference/ab_report.py "$work" | tee "$work/report.md"
tar czf "$out/ab.tgz" -C "$out" ab
